package shortlink

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

func TestParseHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.":          "example.com",
		"xn--bcher-kva.example": "xn--bcher-kva.example",
		"127.0.0.1":             "127.0.0.1",
		"127.1":                 "127.0.0.1",
		"127.0.1":               "127.0.0.1",
		"2130706433":            "127.0.0.1",
		"0x7f000001":            "127.0.0.1",
		"0X7F.0.0.1":            "127.0.0.1",
		"0177.0.0.1":            "127.0.0.1",
		"017700000001":          "127.0.0.1",
		"0x7f.0x0.0.01":         "127.0.0.1",
		"127.0.0.1.":            "127.0.0.1",
		"0x":                    "0.0.0.0",
		"0":                     "0.0.0.0",
		"4294967295":            "255.255.255.255",
		"::ffff:127.0.0.1":      "::ffff:127.0.0.1",
		"0:0:0:0:0:FFFF:7F00:1": "::ffff:127.0.0.1",
		"2001:DB8:0:0:0:0:0:1":  "2001:db8::1",
		"a.b-c.example":         "a.b-c.example",
		"1.2.3.example":         "1.2.3.example",
		"example.0x1g":          "example.0x1g",
		"0x1g":                  "0x1g",
	} {
		h, err := parseHost(in)
		if err != nil || h.name != want {
			t.Errorf("parseHost(%q) = %q, %v; want %q", in, h.name, err, want)
		}
	}
	for _, in := range []string{
		"", ".", "a..b", "-a.example", "a-.example", "ex_ample.com", "a%41.com", "①.com", "１２７.0.0.1",
		"example.123", "1.2.3.4.5", "256.0.0.1", "1.2.3.256", "1.2.65536", "4294967296", "09.0.0.1", "0x1g.1",
		"1.2.3.4..", "fe80::1%en0", "::1:", "1:2", strings.Repeat("a.", 127) + "aa", strings.Repeat("a", 64) + ".com",
	} {
		if h, err := parseHost(in); err == nil {
			t.Errorf("parseHost(%q) = %q, want an error", in, h.name)
		}
	}
}

// Hosts compare by the address they reach: IPv4-mapped IPv6 as IPv4.
func TestHostKeys(t *testing.T) {
	a, _ := parseHost("::ffff:127.0.0.1")
	b, _ := parseHost("0x7f.1")
	if a.key() != b.key() || a.key() != "127.0.0.1" {
		t.Fatalf("keys %q and %q, want both 127.0.0.1", a.key(), b.key())
	}
}

// parseHost never panics, its output parses to itself (canonical forms are
// fixed points), survives a trip through net/url, and an IP host is exactly
// what net/netip reads from its name.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"example.com", "127.1", "0x7f000001", "0177.0.0.1", "::ffff:127.0.0.1", "2130706433",
		"EXAMPLE.com.", "1.2.3.4.", "0x", "09", "a..b", "fe80::1%en0", "xn--bcher-kva.example", "4294967296", "0.0x0.00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		h, err := parseHost(in)
		if err != nil {
			return
		}
		again, err := parseHost(h.name)
		if err != nil || again != h {
			t.Fatalf("parseHost(%q) = %+v, but parseHost(%q) = %+v, %v", in, h, h.name, again, err)
		}
		if h.name != strings.ToLower(h.name) || len(h.name) > 253 {
			t.Fatalf("parseHost(%q) = %q: not lower case or too long", in, h.name)
		}
		if h.ip.IsValid() {
			ip, err := netip.ParseAddr(h.name)
			if err != nil || ip.Unmap() != h.ip {
				t.Fatalf("parseHost(%q) = %+v, but netip reads %q as %v, %v", in, h, h.name, ip, err)
			}
		}
		hostport := h.name
		if strings.Contains(hostport, ":") {
			hostport = "[" + hostport + "]"
		}
		u, err := url.Parse("http://" + hostport + "/")
		if err != nil || u.Hostname() != h.name {
			t.Fatalf("parseHost(%q) = %q, which net/url reads as %v, %v", in, h.name, u, err)
		}
	})
}
