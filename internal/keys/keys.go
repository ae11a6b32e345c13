// Package keys builds Redis keys for casebook's blocks.
//
// Every key has the form
//
//	<namespace>:{<tag>}:<part>:<part>…
//
// Redis Cluster hashes only the text between the first '{' and the next '}',
// so all keys built with the same tag land in one hash slot and may be used
// together in one Lua script or MULTI. Braces inside a tag or part are escaped
// so that caller-supplied ids can never end a tag early or open a new one.
package keys

import "strings"

// escaper makes arbitrary text safe inside a tag: it is injective, so two
// different ids never produce the same key.
var (
	escaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	unescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")
)

// Unescape returns the id that a tag or part of a key was built from.
func Unescape(part string) string { return unescaper.Replace(part) }

// Space is a key namespace, such as "shop:seckill". The zero value has an empty
// namespace and builds keys that begin with the tag. A Space is an immutable
// value and safe for concurrent use.
type Space struct {
	prefix string
}

// NewSpace returns a Space whose keys begin with namespace followed by ':'.
// An empty namespace is allowed.
func NewSpace(namespace string) Space {
	if namespace == "" {
		return Space{}
	}
	return Space{prefix: escaper.Replace(namespace) + ":"}
}

// Key returns "<namespace>:{tag}:part1:part2…". All keys with the same tag
// share one cluster slot, whatever the parts.
func (s Space) Key(tag string, parts ...string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(tag) + 2 + 16*len(parts))
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteString(escaper.Replace(tag))
	b.WriteByte('}')
	for _, p := range parts {
		b.WriteByte(':')
		b.WriteString(escaper.Replace(p))
	}
	return b.String()
}

// Join joins the non-empty parts of a namespace with ':' ("app", "", "rank"
// → "app:rank").
func Join(parts ...string) string {
	out := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if out != "" {
			out += ":"
		}
		out += p
	}
	return out
}

// Prefix returns the namespace with its trailing ':' ("" for the zero Space).
func (s Space) Prefix() string { return s.prefix }

// Pattern returns Prefix with Redis glob characters escaped, so that a SCAN
// pattern built on it matches this namespace literally whatever it contains.
func (s Space) Pattern() string { return GlobEscape(s.prefix) }

var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// GlobEscape escapes the characters Redis' glob patterns (SCAN MATCH, KEYS)
// give a meaning, so that s matches only itself.
func GlobEscape(s string) string { return globEscaper.Replace(s) }
