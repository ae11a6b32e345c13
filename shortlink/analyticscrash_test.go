package shortlink_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// The child process of TestAnalyticsCrash: the environment names its
// backends, the link and how it runs.
const (
	crashChild = "CASEBOOK_SHORTLINK_CRASH_CHILD" // "rest" or "busy"
	crashSQL   = "CASEBOOK_SHORTLINK_CRASH_SQL"   // driver and DSN, "driver dsn"
	crashRedis = "CASEBOOK_SHORTLINK_CRASH_REDIS" // Redis address
	crashNS    = "CASEBOOK_SHORTLINK_CRASH_NS"
	crashCode  = "CASEBOOK_SHORTLINK_CRASH_CODE"
	crashNow   = "CASEBOOK_SHORTLINK_CRASH_NOW" // the child's clock, stopped: Unix nanoseconds
)

// TestAnalyticsCrash SIGKILLs a process recording and flushing clicks. At
// rest between flushes, what is stored is exactly what its acknowledged
// flushes held; killed at any moment of a busy run, at least that and at
// most what it had recorded — and per link and hour every dimension's
// values add up to the total, as each link's part is one transaction.
func TestAnalyticsCrash(t *testing.T) {
	if mode := os.Getenv(crashChild); mode != "" {
		runCrashChild(t, mode)
		return
	}
	for _, mode := range []string{"rest", "busy"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			r, db := testenv.NewRedis(t), testenv.NewSQL(t)
			rc, ok := r.Client.(*redis.Client)
			if !ok {
				t.Skip("the child needs a single Redis address")
			}
			clk := newClock()
			s := newServiceOn(t, r, db, shortlink.Config{FlushEvery: time.Hour, Now: clk.Now, TablesPerDB: 16})
			l, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{})
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run", "^TestAnalyticsCrash$")
			cmd.Env = append(os.Environ(), crashChild+"="+mode, crashSQL+"="+sqlLocation(t, db), crashRedis+"="+rc.Options().Addr,
				crashNS+"="+r.Namespace, crashCode+"="+l.Code, crashNow+"="+strconv.FormatInt(clk.Now().UnixNano(), 10))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var acked, recorded, acks int64
			lines := bufio.NewScanner(out)
			read := func(line string) {
				what, n, _ := strings.Cut(line, " ")
				v, _ := strconv.ParseInt(n, 10, 64)
				switch what {
				case "acked":
					acked, acks = v, acks+1
				case "recorded":
					recorded = v
				}
			}
			for lines.Scan() {
				read(lines.Text())
				if mode == "rest" && strings.HasPrefix(lines.Text(), "resting") || mode == "busy" && acks == 5 {
					break
				}
			}
			if mode == "busy" {
				time.Sleep(time.Duration(5+rand.IntN(40)) * time.Millisecond) // somewhere in a later flush, or between
			}
			cmd.Process.Signal(syscall.SIGKILL)
			for lines.Scan() { // what it said before it died
				read(lines.Text())
			}
			cmd.Wait()
			if acked == 0 || recorded < acked || mode == "rest" && recorded == acked {
				t.Fatalf("the child acknowledged %d and recorded %d clicks", acked, recorded)
			}
			from := clk.Now().Truncate(time.Hour)
			ps, err := s.Clicks(ctx, l.Code, from, from.Add(time.Hour), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			stored := ps[0].Clicks + ps[0].Bots
			if mode == "rest" && stored != acked || stored < acked || stored > recorded {
				t.Fatalf("stored %d clicks; acknowledged %d, recorded %d", stored, acked, recorded)
			}
			for _, d := range allDims {
				cs, err := s.Breakdown(ctx, l.Code, d, from, from.Add(time.Hour), shortlink.MaxBreakdown)
				if err != nil {
					t.Fatal(err)
				}
				var sum int64
				for _, c := range cs {
					sum += c.Clicks + c.Bots
				}
				if sum != stored {
					t.Errorf("%s adds up to %d of %d clicks", d, sum, stored)
				}
			}
			t.Logf("%s: acknowledged %d, stored %d, recorded %d (lost %d unflushed)", mode, acked, stored, recorded, recorded-stored)
		})
	}
}

// sqlLocation is how another process opens db: "driver dsn".
func sqlLocation(t *testing.T, db *sqlx.DB) string {
	t.Helper()
	driver, dsn := testenv.Location(t, db)
	return driver + " " + dsn
}

// runCrashChild records clicks of one link with a spread of headers and
// flushes them, saying "recorded N" before each flush and "acked N" after
// each that succeeded (N clicks in all). At rest it records once more after
// its second acknowledged flush, says "resting" and waits to be killed;
// busy, it goes on until killed.
func runCrashChild(t *testing.T, mode string) {
	ctx := context.Background()
	driver, dsn, _ := strings.Cut(os.Getenv(crashSQL), " ")
	db, err := sqlx.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := strconv.ParseInt(os.Getenv(crashNow), 10, 64)
	s, err := shortlink.NewService(redis.NewClient(&redis.Options{Addr: os.Getenv(crashRedis)}), []*sqlx.DB{db},
		shortlink.Config{BaseURL: "https://sho.rt", Namespace: os.Getenv(crashNS), FlushEvery: time.Hour, TablesPerDB: 16,
			Now: testenv.NewClock(time.Unix(0, ns)).Now})
	if err != nil {
		t.Fatal(err)
	}
	code, reqs := os.Getenv(crashCode), clickRequests(997)
	var n int64
	record := func() {
		for i := range 200 + int(n%300) {
			r := reqs[(int(n)+i)%len(reqs)]
			s.RecordClick(code, "https://example.com/", r, r.Header.Get("X-Test-IP"))
		}
		n += int64(200 + n%300)
		fmt.Printf("recorded %d\n", n)
	}
	for flushes := 0; ; flushes++ {
		record()
		if err := s.FlushAnalytics(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "child flush:", err)
			continue
		}
		fmt.Printf("acked %d\n", n)
		if mode == "rest" && flushes == 1 {
			record()
			fmt.Println("resting")
			time.Sleep(time.Hour)
		}
	}
}
