package shortlink

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
)

// A link on a domain other than the default (the host of Config.BaseURL)
// is stored under its key, code + keySep + the domain's hash: every row,
// Redis key, cache entry and counter of the link is keyed by it, so the
// same code on two domains is two links, and links of the default domain
// are stored exactly as before domains existed. keySep is no code
// character (isCodeChar), so no code of the default domain looks like a
// key.
const (
	keySep  = '~'
	hashLen = 8
	// maxDomainAlias is the longest alias on a domain other than the
	// default: its key must fit the code column (maxAlias).
	maxDomainAlias = maxAlias - 1 - hashLen
)

// domainHash is the key suffix of a domain: 8 hex digits of its SHA-256.
func domainHash(domain string) string {
	sum := sha256.Sum256([]byte(domain))
	return hex.EncodeToString(sum[:hashLen/2])
}

// domains are the short domains of a Service.
type domains struct {
	def    string            // the host of BaseURL, lower case
	byName map[string]string // configured domain → hash; nil without Config.Domains
	byHash map[string]string // hash → domain
}

// newDomains validates Config.Domains: lower-cased DNS names (no port, no
// IP address), no two alike; the BaseURL's host may be listed and is the
// default.
func newDomains(def string, list []string) (domains, error) {
	d := domains{def: canonicalDomain(def)}
	if len(list) == 0 {
		return d, nil
	}
	d.byName, d.byHash = make(map[string]string, len(list)), make(map[string]string, len(list))
	for _, raw := range list {
		name := canonicalDomain(raw)
		switch {
		case !validDomain(name) || endsInNumber(name):
			return domains{}, fmt.Errorf("%w: domain %q is not a DNS name (no port, scheme or IP address)", ErrConfig, raw)
		case name == d.def:
			continue
		case d.byName[name] != "":
			return domains{}, fmt.Errorf("%w: domain %q listed twice", ErrConfig, raw)
		}
		h := domainHash(name)
		if other := d.byHash[h]; other != "" {
			return domains{}, fmt.Errorf("%w: domains %q and %q have the same key suffix; rename one", ErrConfig, other, name)
		}
		d.byName[name], d.byHash[h] = h, name
	}
	return d, nil
}

// canonicalDomain folds case and drops a trailing dot.
func canonicalDomain(s string) string { return strings.TrimSuffix(strings.ToLower(s), ".") }

// option returns the domain Options.Domain names: "" for the default.
func (d domains) option(raw string) (string, error) {
	name := canonicalDomain(raw)
	switch {
	case raw == "" || name == d.def:
		return "", nil
	case d.byName[name] != "":
		return name, nil
	}
	return "", fmt.Errorf("%w: domain %q is not one of Config.Domains", ErrInvalidOptions, raw)
}

// byHost returns the domain a request's Host names ("" for the default):
// case folded, port and trailing dot dropped. Without Config.Domains every
// host is the default; with it, an unknown host is no domain (ok false).
func (d domains) byHost(hostport string) (domain string, ok bool) {
	if d.byName == nil {
		return "", true
	}
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = canonicalDomain(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	if h == d.def {
		return "", true
	}
	if d.byName[h] != "" {
		return h, true
	}
	return "", false
}

// Key returns what the Service's methods that take a code (Resolve,
// ResolveWith, Delete, Stats, Update, History, Clicks, Breakdown, Uniques,
// QRCode, ShortURL) take for the link code on domain: code itself on the
// default domain ("" or the host of BaseURL, any case), code + "~" + 8 hex
// digits on another. A domain not in Config.Domains has no links: its key
// is not found.
func (s *Service) Key(domain, code string) string {
	name := canonicalDomain(domain)
	if name == "" || name == s.domains.def {
		return code
	}
	return code + string(keySep) + domainHash(name)
}

// keyOf is the key l is stored under.
func (s *Service) keyOf(l *Link) string { return s.Key(l.Domain, l.Code) }

// splitKey returns a key's code and domain hash ("" for the default).
func splitKey(key string) (code, hash string) {
	if i := strings.IndexByte(key, keySep); i >= 0 {
		return key[:i], key[i+1:]
	}
	return key, ""
}

// validKey reports whether key could be a link's key at all: a code, or
// a code and the hash of a configured domain.
func (s *Service) validKey(key string) bool {
	code, hash := splitKey(key)
	if hash == "" {
		return validCode(key)
	}
	return validCode(code) && len(key) <= maxAlias && s.domains.byHash[hash] != ""
}

// split returns the visible code and the domain ("" for the default) of
// a key. A key whose domain is no longer configured stays whole, as its
// code, on the default domain.
func (s *Service) split(key string) (code, domain string) {
	c, hash := splitKey(key)
	if hash == "" {
		return key, ""
	}
	if d := s.domains.byHash[hash]; d != "" {
		return c, d
	}
	return key, ""
}

// linkOf is the link of a row, with its visible code and its domain.
func (s *Service) linkOf(r row) *Link {
	l := r.link()
	l.Code, l.Domain = s.split(l.Code)
	return l
}

// LinkURL returns l's public short URL, on l's domain: the scheme, port
// and path of BaseURL with l.Domain's host (ShortURL(Key(l.Domain,
// l.Code))).
func (s *Service) LinkURL(l *Link) string { return s.urlOf(l.Domain, l.Code) }

func (s *Service) urlOf(domain, code string) string {
	u := *s.base
	if domain != "" {
		u.Host = domain
		if p := s.base.Port(); p != "" {
			u.Host += ":" + p
		}
	}
	return strings.TrimSuffix(u.String(), "/") + "/" + code
}
