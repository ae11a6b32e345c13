package devstack

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A slow-loris client — headers trickling in — is cut off at
// ReadHeaderTimeout, and meanwhile a normal client is served.
func TestServerCutsSlowLoris(t *testing.T) {
	srv := Server("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	srv.ReadHeaderTimeout = 300 * time.Millisecond // the production value is 5s; the behaviour is the same
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	slow, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	start := time.Now() // wall clock: an elapsed time; devstack's own tests cannot import testenv
	cut := make(chan time.Duration, 1)
	go func() {
		slow.Write([]byte("GET / HTTP/1.1\r\n"))
		buf := make([]byte, 1)
		for {
			if _, err := slow.Write([]byte("X-Slow: 1\r\n")); err != nil {
				break
			}
			slow.SetReadDeadline(time.Now().Add(100 * time.Millisecond)) // wall clock: a socket deadline
			if _, err := slow.Read(buf); err != nil && !isTimeout(err) {
				break // the server closed the connection
			}
			if time.Since(start) > 5*time.Second { // wall clock: an elapsed time
				break
			}
		}
		cut <- time.Since(start) // wall clock: an elapsed time
	}()
	res, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if d := <-cut; d > 2*time.Second {
		t.Fatalf("a slow-loris client held its connection for %v", d)
	}
	if srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 || srv.MaxHeaderBytes == 0 {
		t.Fatalf("a limit is unset: %+v", srv)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
