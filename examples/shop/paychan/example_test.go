package paychan_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/casebook-dev/casebook/examples/shop/paychan"
	"github.com/casebook-dev/casebook/order"
)

// A buyer pays twice for one payment: the channel collects once, calls the
// shop back once with a signed callback, and answers the shop's query and
// statement download, both signed.
func Example() {
	ctx := context.Background()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		fmt.Println(err)
		return
	}
	verifier := order.RSAVerifier{Key: &key.PublicKey}

	// The shop's POST /pay/notify; a real shop mounts
	// order.Service.CallbackHandler(verifier) there.
	notified := make(chan order.Callback, 1)
	shop := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		cb, _ := order.DecodeCallback(body)
		notified <- cb
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go shop.Serve(ln)
	defer shop.Close()

	ch, err := paychan.New(paychan.Config{Key: key, NotifyURL: "http://" + ln.Addr().String() + "/pay/notify"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := ch.Start("127.0.0.1:0"); err != nil {
		fmt.Println(err)
		return
	}
	defer ch.Close()
	cl := paychan.NewClient(ch.URL(), verifier, nil) // what the shop holds: the URL and the key

	first, _ := cl.Pay(ctx, 1001, 3999_00, "CNY")
	again, _ := cl.Pay(ctx, 1001, 3999_00, "CNY")
	fmt.Println("one transaction:", first.GatewayTxn == again.GatewayTxn)
	cb := <-notified
	fmt.Println("callback:", cb.PayNo, cb.Amount, cb.Success, cb.GatewayTxn == first.GatewayTxn)
	ch.Wait(ctx)

	q, found, err := cl.Query(ctx, 1001)
	fmt.Println("query:", found, q.Amount, err)
	lines, err := cl.Statement(ctx, first.PaidAt, first.PaidAt.Add(time.Second))
	fmt.Println("statement:", len(lines), lines[0].PayNo, lines[0].Amount, err)
	st := ch.Stats()
	fmt.Println("collected:", st.Collections, st.Collected, "acknowledged:", st.Acknowledged)
	// Output:
	// one transaction: true
	// callback: 1001 399900 true true
	// query: true 399900 <nil>
	// statement: 1 1001 399900 <nil>
	// collected: 1 399900 acknowledged: 1
}
