package shortlink

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// host is a URL host in canonical form: two spellings a browser takes to
// the same place have the same host.
type host struct {
	// name is the host as it is stored in a URL: a lower-case ASCII domain
	// without a trailing dot, a dotted-decimal IPv4 address, or an IPv6
	// address as net/netip writes it (without brackets).
	name string
	// ip is the address of an IP host, an IPv4-mapped IPv6 address unmapped
	// to the IPv4 address it reaches; invalid for a domain.
	ip netip.Addr
}

// key is what hosts are compared by.
func (h host) key() string {
	if h.ip.IsValid() {
		return h.ip.String()
	}
	return h.name
}

// loopback reports whether h is this machine whoever asks: a loopback or
// unspecified address (0.0.0.0 reaches the local host), or localhost.
func (h host) loopback() bool {
	if h.ip.IsValid() {
		return h.ip.IsLoopback() || h.ip.IsUnspecified()
	}
	return h.name == "localhost" || strings.HasSuffix(h.name, ".localhost")
}

var errHost = errors.New("malformed host")

// parseHost parses a URL host — without port and brackets, as
// url.URL.Hostname returns it, percent-escapes already decoded — the way
// browsers do (the WHATWG URL Standard's host parser): ASCII case is folded,
// a trailing dot dropped, and a host whose last label is a number is an IPv4
// address in any of the forms browsers accept (1 to 4 parts, each decimal,
// octal with a leading 0 or hex with 0x: 127.1, 2130706433, 0x7f000001 and
// 0177.0.0.1 are all 127.0.0.1). It is stricter than browsers where that
// costs nothing: domains are letters, digits and hyphens only (no '_' or
// '%'), and internationalised names must arrive as punycode (xn--…) — the
// Unicode mapping browsers apply (full-width digits and dots, ①, …) is not
// reproduced, so no non-ASCII host is accepted.
func parseHost(raw string) (host, error) {
	if strings.Contains(raw, ":") {
		ip, err := netip.ParseAddr(raw)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return host{}, errHost
		}
		return host{name: ip.String(), ip: ip.Unmap()}, nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] >= 0x80 {
			return host{}, errors.New("non-ASCII host (give internationalised names in punycode, xn--…)")
		}
	}
	h := strings.ToLower(raw)
	if endsInNumber(h) {
		ip, ok := parseIPv4(h)
		if !ok {
			return host{}, errHost
		}
		return host{name: ip.String(), ip: ip}, nil
	}
	h = strings.TrimSuffix(h, ".")
	if !validDomain(h) {
		return host{}, errHost
	}
	return host{name: h}, nil
}

// endsInNumber is the WHATWG "ends in a number" test: the last label
// (ignoring one trailing dot) is all decimal digits or an IPv4 number.
func endsInNumber(h string) bool {
	labels := strings.Split(h, ".")
	if labels[len(labels)-1] == "" {
		if len(labels) == 1 {
			return false
		}
		labels = labels[:len(labels)-1]
	}
	last := labels[len(labels)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	_, ok := parseIPv4Number(last)
	return ok
}

// parseIPv4 is the WHATWG IPv4 parser: 1 to 4 numbers, all but the last at
// most 255, the last filling the remaining bytes.
func parseIPv4(h string) (netip.Addr, bool) {
	parts := strings.Split(h, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := parseIPv4Number(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(5-len(parts))) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Number reads one part of an IPv4 address: decimal, octal after a
// leading 0, hex after 0x; "0x" alone is 0. Values past 2^32 are clamped
// there (they are too big for any part anyway).
func parseIPv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	base := uint64(10)
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, base = s[2:], 16
	case len(s) >= 2 && s[0] == '0':
		s, base = s[1:], 8
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := uint64(16)            // not a digit
		switch c := s[i] | 0x20; { // ASCII lower case
		case s[i] >= '0' && s[i] <= '9':
			d = uint64(s[i] - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		}
		if d >= base {
			return 0, false
		}
		n = min(n*base+d, 1<<32)
	}
	return n, true
}

// validDomain accepts DNS names of letters, digits and hyphens: labels of
// 1..63, at most 253 in all.
func validDomain(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// hostSet matches hosts by canonical form; with subdomains, a domain also
// matches every name under it.
type hostSet struct {
	keys       map[string]bool
	subdomains bool
	loopback   bool // one of the hosts is this machine: so is every other loopback host
}

// newHostSet parses hosts (an IPv6 address with or without brackets); an
// entry that is no host is an error, not silently never matched.
func newHostSet(hosts []string, subdomains bool) (hostSet, error) {
	s := hostSet{keys: make(map[string]bool, len(hosts)), subdomains: subdomains}
	for _, raw := range hosts {
		h, err := parseHost(strings.TrimSuffix(strings.TrimPrefix(raw, "["), "]"))
		if err != nil {
			return hostSet{}, fmt.Errorf("%q: %w", raw, err)
		}
		s.keys[h.key()] = true
		s.loopback = s.loopback || h.loopback()
	}
	return s, nil
}

// match returns the entry h falls under, or "".
func (s hostSet) match(h host) string {
	if s.loopback && h.loopback() {
		return h.name
	}
	if h.ip.IsValid() || !s.subdomains {
		if s.keys[h.key()] {
			return h.name
		}
		return ""
	}
	for d := h.name; ; {
		if s.keys[d] {
			return d
		}
		dot := strings.IndexByte(d, '.')
		if dot < 0 {
			return ""
		}
		d = d[dot+1:]
	}
}
