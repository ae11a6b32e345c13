package shortlink_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"

	"github.com/casebook-dev/casebook/shortlink"
)

// geoReader is the one method of a GeoIP database reader the adapter
// needs — for example github.com/oschwald/geoip2-golang's *geoip2.Reader,
// whose Country(ip) returns a record with Country.IsoCode, wrapped as
//
//	type maxmind struct{ db *geoip2.Reader }
//
//	func (m maxmind) CountryISO(ip net.IP) (string, error) {
//		rec, err := m.db.Country(ip)
//		if err != nil {
//			return "", err
//		}
//		return rec.Country.IsoCode, nil
//	}
//
// The block imports no GeoIP library: the service brings its own.
type geoReader interface {
	CountryISO(ip net.IP) (string, error)
}

// countryFrom adapts a GeoIP reader to Config.Country: the country of the
// client's address (clientIP as the service's RedirectHandler is given
// it), "" — recorded as unknown — when the address or the lookup fails.
func countryFrom(db geoReader, clientIP func(*http.Request) string) func(*http.Request) string {
	return func(r *http.Request) string {
		ip := net.ParseIP(clientIP(r))
		if ip == nil {
			return ""
		}
		iso, err := db.CountryISO(ip)
		if err != nil {
			return ""
		}
		return iso
	}
}

// fixedGeo answers one country for every address, standing in for a
// database in this example.
type fixedGeo string

func (g fixedGeo) CountryISO(net.IP) (string, error) { return string(g), nil }

// Config.Country from a GeoIP database (MaxMind's GeoLite2 Country, for
// one) instead of a proxy's header. Whatever the resolver answers, only two
// letters are recorded, upper-cased.
func ExampleConfig_country() {
	clientIP := func(r *http.Request) string { return r.Header.Get("X-Real-IP") }
	country := countryFrom(fixedGeo("nz"), clientIP)
	cfg := shortlink.Config{BaseURL: "https://sho.rt", Country: country}

	r := httptest.NewRequest("GET", "/abc", nil)
	r.Header.Set("X-Real-IP", "203.0.113.7")
	fmt.Println(shortlink.CountryCode(cfg.Country(r)))
	r.Header.Set("X-Real-IP", "not an address")
	fmt.Println(shortlink.CountryCode(cfg.Country(r)))
	// Output:
	// NZ
	// (unknown)
}
