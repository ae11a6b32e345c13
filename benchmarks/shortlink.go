package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/shortlink"
)

// shortlinkSeed is how many links the shortlink measurements resolve.
const shortlinkSeed = 1000

type shortlinkFixture struct {
	svc   *shortlink.Service // local cache on
	nolc  *shortlink.Service // local cache off: every resolve reaches Redis
	redis *devcore.Redis
	ns    string
	codes []string
}

// shortlinkSetup builds the shortlink services once for all its
// measurements: 256 tables on the chosen SQL, the chosen Redis, seeded links.
func shortlinkSetup(ctx context.Context, env *Env) (*shortlinkFixture, error) {
	// Asked every time, so each measurement records the backends it is on.
	if _, err := env.Redis(ctx); err != nil {
		return nil, err
	}
	if _, err := env.SQL(ctx); err != nil {
		return nil, err
	}
	v, err := env.Fixture("shortlink", func() (any, func(), error) {
		r, err := env.Redis(ctx)
		if err != nil {
			return nil, nil, err
		}
		sqlb, err := env.SQL(ctx)
		if err != nil {
			return nil, nil, err
		}
		f := &shortlinkFixture{redis: r, ns: "casebook:bench:" + strconv.FormatInt(time.Now().UnixNano(), 36)}
		cfg := shortlink.Config{BaseURL: "https://sho.rt", Namespace: f.ns, FlushEvery: time.Hour}
		if f.svc, err = shortlink.NewService(r.Client, []*sqlx.DB{sqlb.DB}, cfg); err != nil {
			return nil, nil, err
		}
		cfg.LocalTTL = -1
		if f.nolc, err = shortlink.NewService(r.Client, []*sqlx.DB{sqlb.DB}, cfg); err != nil {
			return nil, nil, err
		}
		closeAll := func() {
			f.svc.Close()
			f.nolc.Close()
			devcore.DeleteKeys(context.Background(), r.Client, f.ns+"*")
		}
		if err := f.svc.Migrate(ctx); err != nil {
			closeAll()
			return nil, nil, err
		}
		for i := range shortlinkSeed {
			l, err := f.svc.Shorten(ctx, fmt.Sprintf("https://example.com/%d", i), shortlink.Options{})
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			f.codes = append(f.codes, l.Code)
		}
		return f, closeAll, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*shortlinkFixture), nil
}

// shortlinkResolve measures Resolve on one of its three paths.
func shortlinkResolve(name, unit, path string) Measurement {
	tier := map[string]Tier{"local": TierApp, "redis": TierRedis, "sql": TierMySQL}[path]
	return Measurement{Name: name, Unit: unit, SQLBound: path == "sql", Tier: tier, Setup: func(ctx context.Context, env *Env) (Prepared, error) {
		f, err := shortlinkSetup(ctx, env)
		if err != nil {
			return Prepared{}, err
		}
		svc := f.svc
		if path != "local" {
			svc = f.nolc
		}
		for _, code := range f.codes { // warm the caches the path reads
			if _, err := svc.Resolve(ctx, code); err != nil {
				return Prepared{}, err
			}
		}
		time.Sleep(20 * time.Millisecond) // ristretto admits asynchronously
		var i atomic.Int64
		op := func() error {
			code := f.codes[i.Add(1)%shortlinkSeed]
			if path == "sql" { // drop the Redis copy so the read goes to SQL
				if err := f.redis.Client.Del(ctx, f.ns+":shortlink:{"+code+"}:link").Err(); err != nil {
					return err
				}
			}
			_, err := svc.Resolve(ctx, code)
			return err
		}
		return Prepared{Op: op, Workers: 4, Backend: describeRedis(f.redis) + " + " + describeSQL(env.sql.Kind)}, nil
	}}
}

// httpRedirects measures GET /{code} over loopback through h (nil: the
// shortlink handler) with 8 keep-alive clients.
func httpRedirects(name, unit string, bare bool) Measurement {
	return Measurement{Name: name, Unit: unit, Tier: TierApp, Setup: func(ctx context.Context, env *Env) (Prepared, error) {
		f, err := shortlinkSetup(ctx, env)
		if err != nil {
			return Prepared{}, err
		}
		h := f.svc.RedirectHandler(nil)
		if bare {
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "private, max-age=0")
				w.Header().Set("Location", "https://example.com"+r.URL.Path)
				w.WriteHeader(http.StatusFound)
			})
		}
		srv := httptest.NewServer(h)
		client := &http.Client{
			Transport:     &http.Transport{MaxIdleConnsPerHost: 64},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		var i atomic.Int64
		op := func() error {
			res, err := client.Get(srv.URL + "/" + f.codes[i.Add(1)%shortlinkSeed])
			if err != nil {
				return err
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusFound {
				return fmt.Errorf("status %d", res.StatusCode)
			}
			return nil
		}
		return Prepared{Op: op, Workers: 8, Backend: "loopback HTTP", Cleanup: srv.Close}, nil
	}}
}
