// The benchmarks' event-loop provider over HTTP/2 and TLS (nghttp2 on an Asio SSL stream), as providers serve
// their APIs: many requests share a connection, each on a stream of its own. It answers what StreamServer
// answers (a request not streamed at once: it has no latency), with a certificate for 127.0.0.1 made when it
// starts (its own authority, written to a file for the clients to trust). Not an HTTP/2 server in general: it
// reads what libcurl sends, nothing else. Needs OpenSSL 3.
#ifndef LLMRETRY_BENCH_H2_STREAM_SERVER_HPP
#define LLMRETRY_BENCH_H2_STREAM_SERVER_HPP

#include <nghttp2/nghttp2.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "stream_server.hpp"

namespace bench {

/// Serves on 127.0.0.1 (any free port) over TLS with ALPN "h2" on the io_context it is given, which runs it:
/// a POST whose body asks for `"stream": true` gets `chunks` chat.completion.chunk events `interval` apart
/// (the first after one interval), then `data: [DONE]`; any other request a small chat.completion at once.
/// Its certificate, for IP 127.0.0.1 and its own authority, is written as PEM to `certificate_file`.
/// Throws std::runtime_error when OpenSSL cannot make the certificate or the file cannot be written.
/// Destroy it only once the io_context is stopped.
class H2StreamServer {
 public:
  H2StreamServer(boost::asio::io_context& io, int chunks, std::chrono::milliseconds interval,
                 const std::string& certificate_file)
      : tls_(boost::asio::ssl::context::tls_server),
        acceptor_(io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)),
        chunks_(chunks),
        interval_(interval) {
    certify(certificate_file);
    SSL_CTX_set_alpn_select_cb(tls_.native_handle(), &H2StreamServer::select_h2, nullptr);
    acceptor_.listen(boost::asio::socket_base::max_listen_connections);
    accept_each(acceptor_,
                [this](tcp::socket socket) { std::make_shared<Connection>(std::move(socket), *this)->start(); });
  }

  /// Returns the port it listens on.
  [[nodiscard]] unsigned short port() const { return acceptor_.local_endpoint().port(); }

 private:
  using tcp = boost::asio::ip::tcp;

  template <class T, void (*Free)(T*)>
  struct Freed {
    void operator()(T* p) const noexcept { Free(p); }
  };
  using Key = std::unique_ptr<EVP_PKEY, Freed<EVP_PKEY, EVP_PKEY_free>>;
  using Certificate = std::unique_ptr<X509, Freed<X509, X509_free>>;
  using Extension = std::unique_ptr<X509_EXTENSION, Freed<X509_EXTENSION, X509_EXTENSION_free>>;

  /// Makes a key and a self-signed certificate for 127.0.0.1, serves with them, and writes the certificate.
  void certify(const std::string& certificate_file) {
    const auto fail = [](const std::string& what) { throw std::runtime_error("the HTTP/2 provider: " + what); };
    const Key key(EVP_EC_gen("P-256"));
    const Certificate certificate(X509_new());
    if (!key || !certificate) fail("OpenSSL could not make a key");
    X509_NAME* name = X509_get_subject_name(certificate.get());
    if (X509_set_version(certificate.get(), 2) != 1 ||
        ASN1_INTEGER_set(X509_get_serialNumber(certificate.get()), 1) != 1 ||
        X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -3600) == nullptr ||
        X509_gmtime_adj(X509_getm_notAfter(certificate.get()), 7 * 24 * 3600) == nullptr ||
        X509_set_pubkey(certificate.get(), key.get()) != 1 ||
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("127.0.0.1"), -1,
                                   -1, 0) != 1 ||
        X509_set_issuer_name(certificate.get(), name) != 1)
      fail("OpenSSL could not fill in the certificate");
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, certificate.get(), certificate.get(), nullptr, nullptr, 0);
    for (const auto& [nid, value] :
         {std::pair{NID_subject_alt_name, "IP:127.0.0.1"}, std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
      const Extension extension(X509V3_EXT_conf_nid(nullptr, &context, nid, value));
      if (!extension || X509_add_ext(certificate.get(), extension.get(), -1) != 1) fail("no certificate extension");
    }
    if (X509_sign(certificate.get(), key.get(), EVP_sha256()) == 0) fail("OpenSSL could not sign the certificate");
    if (SSL_CTX_use_certificate(tls_.native_handle(), certificate.get()) != 1 ||
        SSL_CTX_use_PrivateKey(tls_.native_handle(), key.get()) != 1)
      fail("OpenSSL refused the certificate");
    std::FILE* file = std::fopen(certificate_file.c_str(), "w");
    if (file == nullptr) fail("cannot write " + certificate_file + ": " + std::strerror(errno));
    const bool written = PEM_write_X509(file, certificate.get()) == 1;
    if (std::fclose(file) != 0 || !written) fail("cannot write " + certificate_file);
  }

  /// Chooses "h2" among the protocols the client offers (ALPN), or refuses the handshake.
  static int select_h2(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* in,
                       unsigned int in_length, void*) {
    for (unsigned int at = 0; at < in_length; at += 1U + in[at]) {
      if (in[at] == 2 && at + 3 <= in_length && std::memcmp(in + at + 1, "h2", 2) == 0) {
        *out = in + at + 1;
        *out_length = 2;
        return SSL_TLSEXT_ERR_OK;
      }
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }

  struct Connection : std::enable_shared_from_this<Connection> {
    /// One request: its body, then what is left to send of its answer.
    struct Stream {
      explicit Stream(const boost::asio::any_io_executor& executor) : timer(executor) {}
      std::string body;
      std::string pending;  ///< produced, not yet taken by nghttp2
      int sent = 0;         ///< events produced
      bool done = false;    ///< nothing comes after `pending`
      boost::asio::steady_timer timer;
    };

    Connection(tcp::socket socket, H2StreamServer& owner) : tls(std::move(socket), owner.tls_), server(owner) {}
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    Connection(Connection&&) = delete;
    Connection& operator=(Connection&&) = delete;
    ~Connection() {
      if (session != nullptr) nghttp2_session_del(session);
    }

    void start() {
      tls.async_handshake(boost::asio::ssl::stream_base::server,
                          [self = shared_from_this()](boost::system::error_code error) {
                            if (error || !self->open_session()) return;
                            self->flush();
                            self->read();
                          });
    }

    bool open_session() {
      nghttp2_session_callbacks* callbacks = nullptr;
      if (nghttp2_session_callbacks_new(&callbacks) != 0) return false;
      nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &Connection::on_begin_headers);
      nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Connection::on_data);
      nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Connection::on_frame);
      nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Connection::on_close);
      const int made = nghttp2_session_server_new(&session, callbacks, this);
      nghttp2_session_callbacks_del(callbacks);
      if (made != 0) return false;
      const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000}};
      return nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, 1) == 0;
    }

    void read() {
      tls.async_read_some(
          boost::asio::buffer(in), [self = shared_from_this()](boost::system::error_code error, std::size_t length) {
            if (error || nghttp2_session_mem_recv(self->session, reinterpret_cast<const std::uint8_t*>(self->in.data()),
                                                  length) < 0)
              return self->close();
            self->flush();
            self->read();
          });
    }

    /// Writes what nghttp2 has to send, one write at a time.
    void flush() {
      if (writing || closed) return;
      out.clear();
      const std::uint8_t* data = nullptr;
      for (ssize_t length = 0; (length = nghttp2_session_mem_send(session, &data)) > 0;)
        out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(length));
      if (out.empty()) return;
      writing = true;
      boost::asio::async_write(tls, boost::asio::buffer(out),
                               [self = shared_from_this()](boost::system::error_code error, std::size_t) {
                                 self->writing = false;
                                 if (error) return self->close();
                                 self->flush();
                               });
    }

    void close() {
      closed = true;
      streams.clear();  // their timers end, and with them the references they hold
      boost::system::error_code ignored;
      tls.lowest_layer().close(ignored);
    }

    /// Answers stream `id`, whose request has arrived whole.
    void answer(std::int32_t id, Stream& request) {
      nghttp2_data_provider body{};
      body.read_callback = &Connection::produce;
      const bool streamed = asks_stream(request.body);
      request.body.clear();
      const nghttp2_nv headers[] = {header(":status", "200"),
                                    header("content-type", streamed ? "text/event-stream" : "application/json")};
      if (!streamed) {
        request.pending = completion_body();
        request.done = true;
      }
      if (nghttp2_submit_response(session, id, headers, 2, &body) != 0) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
        return;
      }
      if (streamed) next_event(id, request);
    }

    void next_event(std::int32_t id, Stream& answering) {
      answering.timer.expires_after(server.interval_);
      answering.timer.async_wait([self = shared_from_this(), id](boost::system::error_code error) {
        if (error || self->closed) return;
        const auto found = self->streams.find(id);
        if (found == self->streams.end()) return;
        Stream& s = found->second;
        s.done = ++s.sent > self->server.chunks_;
        s.pending += s.done ? done_event() : chunk_event();
        nghttp2_session_resume_data(self->session, id);
        if (!s.done) self->next_event(id, s);
        self->flush();
      });
    }

    static nghttp2_nv header(const char* name, const char* value) {
      return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name)),
              reinterpret_cast<std::uint8_t*>(const_cast<char*>(value)), std::strlen(name), std::strlen(value),
              static_cast<std::uint8_t>(NGHTTP2_NV_FLAG_NONE)};
    }

    static Connection& of(void* user) { return *static_cast<Connection*>(user); }

    static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
      if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
        Connection& c = of(user);
        c.streams.try_emplace(frame->hd.stream_id, c.tls.get_executor());
      }
      return 0;
    }

    static int on_data(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data, std::size_t length,
                       void* user) {
      Connection& c = of(user);
      const auto found = c.streams.find(id);
      if (found != c.streams.end() && found->second.body.size() + length <= max_body)
        found->second.body.append(reinterpret_cast<const char*>(data), length);
      return 0;
    }

    static int on_frame(nghttp2_session*, const nghttp2_frame* frame, void* user) {
      if ((frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) ||
          (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
        return 0;
      Connection& c = of(user);
      const auto found = c.streams.find(frame->hd.stream_id);
      if (found != c.streams.end()) c.answer(frame->hd.stream_id, found->second);
      return 0;
    }

    static int on_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* user) {
      of(user).streams.erase(id);
      return 0;
    }

    /// Hands nghttp2 what stream `id` has produced; defers it when nothing is there yet.
    static ssize_t produce(nghttp2_session*, std::int32_t id, std::uint8_t* buffer, std::size_t length,
                           std::uint32_t* flags, nghttp2_data_source*, void* user) {
      Connection& c = of(user);
      const auto found = c.streams.find(id);
      if (found == c.streams.end()) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      Stream& s = found->second;
      const std::size_t taken = std::min(length, s.pending.size());
      std::memcpy(buffer, s.pending.data(), taken);
      s.pending.erase(0, taken);
      if (s.pending.empty() && s.done) *flags |= static_cast<std::uint32_t>(NGHTTP2_DATA_FLAG_EOF);
      else if (taken == 0) return NGHTTP2_ERR_DEFERRED;
      return static_cast<ssize_t>(taken);
    }

    static constexpr std::size_t max_body = std::size_t{1} << 20;

    boost::asio::ssl::stream<tcp::socket> tls;
    H2StreamServer& server;
    nghttp2_session* session = nullptr;
    std::array<char, 16384> in{};
    std::string out;
    bool writing = false;
    bool closed = false;
    std::unordered_map<std::int32_t, Stream> streams;
  };

  boost::asio::ssl::context tls_;
  tcp::acceptor acceptor_;
  int chunks_;
  std::chrono::milliseconds interval_;
};

}  // namespace bench

#endif  // LLMRETRY_BENCH_H2_STREAM_SERVER_HPP
