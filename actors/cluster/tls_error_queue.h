// Keeps one failed TLS link from closing the others (CAF 0.17's OpenSSL module; see the .cpp).
#pragma once

namespace troupe::actors {

// Does nothing at run time: configure_network calls it so the linker keeps the file whose
// definitions of SSL_read, SSL_write, SSL_connect and SSL_accept CAF's TLS module then uses.
void keep_tls_error_queue_fix();

}  // namespace troupe::actors
