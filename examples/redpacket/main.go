// Command redpacket runs a group chat's red packets: 500 members, 100
// packets sent, everyone grabbing at once on a Redis Cluster, the claims
// carried through Kafka into SQL, then the expiry refunds — and prints the
// money balance sheet, which must balance to the fen (it exits 1 if not).
//
//	go run ./examples/redpacket
//
// Embedded defaults: a spawned Redis Cluster (one embedded Redis without the
// redis-server binary), kfake, 4 SQLite files. Real servers:
// CASEBOOK_REDIS_CLUSTER or CASEBOOK_REDIS_ADDR, CASEBOOK_KAFKA_BROKERS,
// CASEBOOK_MYSQL_DSN.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

func main() {
	packets := flag.Int("packets", 100, "packets sent into the group")
	flag.Parse()
	devstack.Run(func(ctx context.Context) error { return run(ctx, *packets) })
}

func run(ctx context.Context, packets int) error {
	st, err := devstack.OpenSharded(ctx, devstack.FromEnv(), "casebook_redpacket", 4, os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	r, k, sqls, dbs := st.Redis, st.Kafka, st.SQLs, st.DBs()

	// The clock starts now; the example moves it 25 hours on for the
	// refunds instead of waiting.
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*")
	svc, err := redpacket.New(r.Client, dbs, redpacket.Config{Namespace: ns, TablesPerDB: 4, Now: clock})
	if err != nil {
		return err
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		return err
	}

	const members = 500
	rng := rand.New(rand.NewPCG(1, 2))
	var sent []redpacket.Packet
	for i := range packets {
		sender := "member-" + strconv.Itoa(rng.IntN(members))
		total, count := 100+rng.Int64N(20_000), 1+rng.IntN(members)
		total = max(total, int64(count))
		if err := svc.Deposit(ctx, sender, total); err != nil {
			return err
		}
		p, err := svc.Send(ctx, redpacket.SendRequest{Sender: sender, RequestID: "packet-" + strconv.Itoa(i), Total: total, Count: count, Greeting: "恭喜发财"})
		if err != nil {
			return err
		}
		sent = append(sent, p)
	}
	fmt.Printf("%d packets sent into a group of %d on %s Redis (%d node(s)), %s × %d\n", packets, members, r.Kind, len(r.Addrs), sqls[0].Kind, len(sqls))

	// Everyone online grabs at once (about 7 in 10 members see each
	// packet in time): Grab sheds, Open assigns.
	start := time.Now()
	var opened, shed atomic.Int64
	var wg sync.WaitGroup
	for m := range members {
		wg.Go(func() {
			user := "member-" + strconv.Itoa(m)
			var reqs []redpacket.OpenRequest
			for i, p := range sent {
				if (m*7+i*3)%10 >= 7 {
					continue // did not see this one
				}
				if err := svc.Grab(ctx, p.ID, user); err != nil {
					shed.Add(1)
					continue
				}
				reqs = append(reqs, redpacket.OpenRequest{Packet: p.ID, User: user})
			}
			for _, res := range svc.OpenMany(ctx, reqs) {
				if res.Err == nil {
					opened.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("grabs in %v: %d shares opened, %d shed by Grab\n", time.Since(start).Round(time.Millisecond), opened.Load(), shed.Load())

	// Claims: outbox → Kafka → the ledger consumer.
	topic := "redpacket-claims-" + ns
	if err := kafka.CreateTopic(k.Brokers, topic, 8); err != nil {
		return err
	}
	pub, err := kafka.Dial(k.Brokers, "redpacket-relay")
	if err != nil {
		return err
	}
	defer pub.Close()
	relayed, err := outbox.NewRelay(r.Client, svc.Outboxes(), topic, pub).DrainAll(ctx)
	if err != nil {
		return err
	}
	// A message holds the claims one script call made on one packet; each
	// takes one SQL transaction for the packet's ledger and one per
	// receivers' shard: on a loaded machine with a fsync per commit that can
	// take minutes; ConsumeN fails if it does not finish.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	c, err := kafka.ConsumeN(cctx, k.Brokers, "ledger-"+ns, []string{topic}, int64(relayed), svc.Handle, kafka.ConsumerConfig{})
	if err != nil {
		return err
	}
	fmt.Printf("%d claim messages through Kafka (%s) into SQL: %d recorded, %d poison\n", relayed, k.Kind, c.Handled(), c.Poisoned())

	offset.Store(int64(25 * time.Hour))
	refunded, fenced, err := svc.RefundDue(ctx, 1000)
	if err != nil {
		return err
	}
	var luckiest redpacket.Claim
	for _, p := range sent {
		d, err := svc.Detail(ctx, p.ID)
		if err != nil {
			return err
		}
		if d.Luckiest != nil && d.Luckiest.Amount > luckiest.Amount {
			luckiest = *d.Luckiest
		}
	}
	fmt.Printf("after 24 h: %d packets refunded, %d waiting behind the fence; luckiest grab: %s with ¥%.2f\n",
		refunded, fenced, luckiest.User, float64(luckiest.Amount)/100)

	b, err := svc.Audit(ctx)
	if err != nil {
		return err
	}
	yuan := func(fen int64) string { return fmt.Sprintf("¥%.2f", float64(fen)/100) }
	fmt.Println("balance sheet")
	fmt.Printf("  senders debited   %12s\n", yuan(b.Debited))
	fmt.Printf("  claimed           %12s\n", yuan(b.Claimed))
	fmt.Printf("  refunded          %12s\n", yuan(b.Refunded))
	fmt.Printf("  still open        %12s\n", yuan(b.Open))
	fmt.Printf("  receivers credited%12s\n", yuan(b.Credited))
	if b.Debited != b.Claimed+b.Refunded+b.Open || b.Credited != b.Claimed || fenced != 0 {
		return errors.New("the books do not balance")
	}
	fmt.Println("  debited = claimed + refunded + open, credited = claimed: balanced to the fen")
	return nil
}
