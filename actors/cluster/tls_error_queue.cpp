// CAF 0.17's TLS links (libcaf_openssl's session.cpp, as Debian ships 0.17.6) call SSL_read,
// SSL_write, SSL_connect and SSL_accept without emptying the thread's OpenSSL error queue first,
// and empty it only inside an INFO log statement that Debian's build compiles out. SSL_get_error
// reads that queue. When a peer process dies, its kernel closes the link and OpenSSL 3 reports
// "unexpected EOF while reading": an entry that stays queued. The next would-block read on any
// other link of the same middleman thread is then taken for an SSL error, and that healthy link
// is closed too. A head lost every node when one died, and their requests failed with "no live
// replica" (cluster_auth_test, a_node_killed_over_tls_takes_no_other_link_with_it). CAF's later
// network layer (libcaf_net) clears the queue before each call; Debian's library cannot be
// changed from here, so these definitions interpose on libssl's: an executable's symbols come
// first in dynamic lookup, and the linker exports them because libcaf_openssl refers to them.
// Each empties the queue, as OpenSSL's documentation asks before every TLS I/O call, and calls
// libssl's own.
#include "actors/cluster/tls_error_queue.h"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdio>
#include <cstdlib>

namespace {

template <class F>
F libssl(const char* name) {
  void* f = ::dlsym(RTLD_NEXT, name);
  if (!f) {
    std::fprintf(stderr, "troupe: libssl has no %s\n", name);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = libssl<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = libssl<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_connect(SSL* ssl) {
  static const auto real = libssl<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

int SSL_accept(SSL* ssl) {
  static const auto real = libssl<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

}  // extern "C"

namespace troupe::actors {

void keep_tls_error_queue_fix() {}

}  // namespace troupe::actors
