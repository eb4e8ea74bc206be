#include "server/http.h"

#include <httplib.h>

#include <strings.h>

#include <chrono>
#include <thread>
#include <sys/socket.h>

namespace pi::server {
namespace {

// Exact paths: the regex metacharacters httplib would otherwise interpret, escaped.
std::string escape_regex(const std::string& path) {
  std::string pattern;
  for (char c : path) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) pattern += '\\';
    pattern += c;
  }
  return pattern;
}

}  // namespace

std::string HttpRequest::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (strcasecmp(k.c_str(), name.c_str()) == 0) return v;
  return "";
}

struct HttpServer::Impl {
  httplib::Server svr;
  std::function<std::string(int)> error_body;
  std::function<void(HttpResponse&)> post;
};

HttpServer::HttpServer(const HttpOptions& o) : impl_(std::make_unique<Impl>()), o_(o) {
  const size_t threads = static_cast<size_t>(std::max(2, o.threads));
  impl_->svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->svr.set_payload_max_length(o.max_body);
  impl_->svr.set_read_timeout(o.read_timeout_s, 0);
  impl_->svr.set_write_timeout(o.write_timeout_s, 0);
  impl_->svr.set_keep_alive_timeout(o.keep_alive_s);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which lets a second server
  // bind a port already in use and silently share its connections.
  impl_->svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  impl_->svr.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty() || !impl_->error_body) return;
    HttpResponse r;
    r.status = res.status;
    r.body = impl_->error_body(res.status);
    if (impl_->post) impl_->post(r);
    for (const auto& [k, v] : r.headers) res.set_header(k, v);
    res.set_content(r.body, r.content_type);
  });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::set_error_body(std::function<std::string(int)> f) { impl_->error_body = std::move(f); }
void HttpServer::set_post_process(std::function<void(HttpResponse&)> f) { impl_->post = std::move(f); }

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler h) {
  add_route(method, escape_regex(path), std::move(h));
}

void HttpServer::route_prefix(const std::string& method, const std::string& prefix,
                              HttpHandler h) {
  add_route(method, escape_regex(prefix) + "[^/]+", std::move(h));
}

void HttpServer::add_route(const std::string& method, const std::string& pattern, HttpHandler h) {
  auto adapt = [this, h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    r.body = req.body;
    for (const auto& [k, v] : req.headers) r.headers.emplace(k, v);
    for (const auto& [k, v] : req.params) r.query.emplace(k, v);
    HttpResponse out = h(r);
    if (impl_->post) impl_->post(out);
    res.status = out.status;
    for (const auto& [k, v] : out.headers) res.set_header(k, v);
    if (!out.stream) {
      res.set_content(out.body, out.content_type);
      return;
    }
    auto stream = std::move(out.stream);
    res.set_chunked_content_provider(
        out.content_type, [stream = std::move(stream)](size_t, httplib::DataSink& sink) {
          stream([&sink](std::string_view piece) {
            return piece.empty() || sink.write(piece.data(), piece.size());
          });
          sink.done();
          return true;
        });
  };
  if (method == "GET") {
    impl_->svr.Get(pattern, adapt);
  } else if (method == "POST") {
    impl_->svr.Post(pattern, adapt);
  } else if (method == "OPTIONS") {
    impl_->svr.Options(pattern, adapt);
  }
}

Status HttpServer::bind() {
  if (o_.port == 0) {
    const int p = impl_->svr.bind_to_any_port(o_.host);
    if (p <= 0) return err("cannot listen on %s (any port)", o_.host.c_str());
    port_ = p;
  } else {
    if (!impl_->svr.bind_to_port(o_.host, o_.port))
      return err("cannot listen on %s:%d (in use, or not an address of this machine)",
                 o_.host.c_str(), o_.port);
    port_ = o_.port;
  }
  return Status::Ok();
}

void HttpServer::run() {
  running_.store(true);
  if (!stopped_.load()) impl_->svr.listen_after_bind();
  running_.store(false);
}

void HttpServer::stop() {
  stopped_.store(true);
  // httplib's stop() does nothing until the listener runs: repeat it until run() returns.
  while (running_.load()) {
    impl_->svr.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace pi::server
