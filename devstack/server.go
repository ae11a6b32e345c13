package devstack

import (
	"net/http"
	"time"
)

// Server returns an http.Server for h on addr with every limit a server
// facing the Internet needs set: a client that sends its headers slowly
// (slow-loris), stalls its body or never reads the reply is cut off, and
// headers are bounded. Handlers bound bodies themselves
// (http.MaxBytesReader, 413).
func Server(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
}
