// A thin adapter over cpp-httplib: the only file set that includes httplib.h. Routes map
// (method, exact path, or a prefix and one segment) to handlers that take a plain request and return a plain response;
// a response may instead stream its body through a writer that reports a gone client.
//
// Thread-safety: handlers run on the server's worker threads, one request per thread at a
// time; a handler must synchronise any state it shares. route() and set_*() are called before
// run(); stop() may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "powerinfer/error.h"

namespace pi::server {

struct HttpRequest {
  std::string method;
  std::string path;
  std::string body;
  std::multimap<std::string, std::string> headers;  // names as sent
  std::multimap<std::string, std::string> query;    // the URL's query parameters, decoded
  std::string header(const std::string& name) const;  // case-insensitive; "" when absent
};

// Writes one piece of a streamed body; false when the client is gone (stop writing).
using BodyWriter = std::function<bool(std::string_view)>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // When set, the body is streamed (chunked): called once on the worker thread with a writer.
  std::function<void(const BodyWriter&)> stream;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;           // 0: any free port
  size_t max_body = 1 << 20;  // bytes; a larger body gets 413
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  int keep_alive_s = 5;
  int threads = 16;  // worker threads (each kept-alive connection holds one)
};

class HttpServer {
 public:
  explicit HttpServer(const HttpOptions& o);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void route(const std::string& method, const std::string& path, HttpHandler h);
  // Routes every path that is `prefix` followed by one non-empty segment without '/'
  // (e.g. "/slots/" for /slots/0); the handler reads the segment from HttpRequest::path.
  void route_prefix(const std::string& method, const std::string& prefix, HttpHandler h);
  // Answers requests no route matches (404) and errors of the HTTP layer (413, 400): gets the
  // status and returns the body (JSON).
  void set_error_body(std::function<std::string(int status)> f);
  // Called for every response before it is sent (e.g. CORS headers).
  void set_post_process(std::function<void(HttpResponse&)> f);

  // Binds host:port; fails naming them. port() is then the bound port.
  Status bind();
  int port() const { return port_; }
  // Serves until stop(). Returns when the listener closes, at once when stop() came first.
  void run();
  // Ends run() (waiting for it) from any thread, also while it is starting.
  void stop();

 private:
  // Registers a handler for paths matching the regex `pattern` whole.
  void add_route(const std::string& method, const std::string& pattern, HttpHandler h);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  HttpOptions o_;
  int port_ = 0;
  std::atomic<bool> running_{false}, stopped_{false};
};

}  // namespace pi::server
