package shortlink

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// MaxURLLength is the longest long URL accepted, before and after
// normalisation (the de-facto limit of browsers and of most peers).
const MaxURLLength = 2048

// normalizeURL validates raw as a link target and returns its normal form:
// lower-case scheme, the host in canonical form (see parseHost), no default
// port, "/" for an empty path. It refuses anything but http and https
// (javascript:, data:, file:, …), credentials in the URL, a missing or
// malformed host, links back to this service and blocked domains — hosts
// compared in canonical form, so no spelling of them gets through.
func (s *Service) normalizeURL(raw string) (string, error) {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidURL, fmt.Sprintf(why, args...))
	}
	if raw == "" {
		return "", bad("empty")
	}
	if len(raw) > MaxURLLength {
		return "", bad("%d bytes, longer than %d", len(raw), MaxURLLength)
	}
	for _, r := range raw {
		if r <= ' ' || r == 0x7f {
			return "", bad("contains a space or control character")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", bad("unparsable")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", bad("scheme %q is not http or https", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return "", bad("no host")
	}
	if u.User != nil {
		return "", bad("credentials in the URL")
	}
	if strings.Contains(u.Hostname(), ":") != strings.HasPrefix(u.Host, "[") {
		return "", bad("malformed host %q", u.Host)
	}
	h, err := parseHost(u.Hostname())
	if err != nil {
		return "", bad("%q: %v", u.Hostname(), err)
	}
	port := u.Port()
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", bad("port %q", port)
		}
		port = strconv.Itoa(n) // browsers read 0080 as 80
	}
	if port == "80" && scheme == "http" || port == "443" && scheme == "https" {
		port = ""
	}
	if own := s.ownHosts.match(h); own != "" {
		return "", bad("links to this service (%s)", own)
	}
	if d := s.blocked.match(h); d != "" {
		return "", fmt.Errorf("%w: %w: %s", ErrInvalidURL, ErrBlocked, d)
	}
	u.Scheme = scheme
	u.Host = h.name
	if h.ip.IsValid() && strings.Contains(h.name, ":") {
		u.Host = "[" + h.name + "]"
	}
	if port != "" {
		u.Host += ":" + port
	}
	if u.Path == "" && u.RawPath == "" {
		u.Path = "/"
	}
	out := u.String()
	if len(out) > MaxURLLength {
		return "", bad("%d bytes once normalised, longer than %d", len(out), MaxURLLength)
	}
	return out, nil
}

// validCode reports whether code could be a code or alias at all; anything
// else is not looked up.
func validCode(code string) bool {
	if code == "" || len(code) > maxAlias {
		return false
	}
	for i := 0; i < len(code); i++ {
		if !isCodeChar(code[i]) {
			return false
		}
	}
	return true
}

func isCodeChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '-' || c == '_'
}

const minAlias, maxAlias = 3, 64

// DefaultReserved are aliases nobody may take: they would shadow the
// service's own routes or impersonate it.
var DefaultReserved = []string{"api", "admin", "static", "assets", "health", "healthz", "metrics",
	"login", "logout", "signup", "settings", "stats", "help", "about", "www", "favicon", "robots"}

func (s *Service) validateAlias(alias string) error {
	if len(alias) < minAlias || len(alias) > maxAlias {
		return fmt.Errorf("%w: %d characters, want %d..%d", ErrInvalidAlias, len(alias), minAlias, maxAlias)
	}
	if !validCode(alias) {
		return fmt.Errorf("%w: only letters, digits, '-' and '_'", ErrInvalidAlias)
	}
	if s.reserved[strings.ToLower(alias)] {
		return fmt.Errorf("%w: %q is reserved", ErrInvalidAlias, alias)
	}
	return nil
}
