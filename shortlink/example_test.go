package shortlink_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/shortlink"
)

// Shorten a URL under a custom alias with a visit limit, and resolve it.
func Example() {
	ctx := context.Background()
	sc, err := devstack.OpenScratch(ctx, "example") // a service passes its own clients
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()

	svc, err := shortlink.NewService(sc.Redis, []*sqlx.DB{sc.SQL}, shortlink.Config{BaseURL: "https://sho.rt", Namespace: sc.Namespace})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	link, err := svc.Shorten(ctx, "https://go.dev/doc/", shortlink.Options{Alias: "go-docs", MaxVisits: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(svc.ShortURL(link.Code))
	got, err := svc.Resolve(ctx, "go-docs")
	fmt.Println(got.URL, err)
	_, err = svc.Resolve(ctx, "go-docs")
	fmt.Println(errors.Is(err, shortlink.ErrMaxVisits))
	_, err = svc.Shorten(ctx, "https://sho.rt/go-docs", shortlink.Options{})
	fmt.Println(errors.Is(err, shortlink.ErrInvalidURL))
	// Output:
	// https://sho.rt/go-docs
	// https://go.dev/doc/ <nil>
	// true
	// true
}
