package feed

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
)

// Cursor versions, the first byte of every cursor: a bare position, or a
// position with a tag (Config.CursorKey).
const (
	cursorVersion       = 1
	cursorVersionTagged = 2
	cursorTagSize       = 16 // bytes of HMAC-SHA256 kept
)

// position is a place in a timeline: the (score, id) of the last post shown.
// Timelines are ordered by score, then by the id's decimal text, both
// descending (the order Redis returns sorted-set members of equal score in).
type position struct {
	score int64
	id    int64
}

var cursorEncoding = base64.RawURLEncoding.Strict()

// cursors makes and reads the cursors of one deployment: bare positions
// without a key, tagged ones with a key.
type cursors struct{ key []byte }

// encode makes reader's opaque cursor at p: base64url of a version byte,
// the score and the id, big-endian, then (with a key) the first 16 bytes
// of HMAC-SHA256(key, those 17 bytes + reader).
func (cs cursors) encode(reader string, p position) string {
	b := make([]byte, 17, 17+cursorTagSize)
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:], uint64(p.score))
	binary.BigEndian.PutUint64(b[9:], uint64(p.id))
	if cs.key != nil {
		b[0] = cursorVersionTagged
		b = append(b, cs.tag(b, reader)...)
	}
	return cursorEncoding.EncodeToString(b)
}

// decode parses a cursor encode made for reader; anything else is
// ErrCursor. Without a key every well-formed position is one.
func (cs cursors) decode(reader, c string) (position, error) {
	b, err := cursorEncoding.DecodeString(c)
	// encoding/base64 skips \r and \n: refuse them, so one position has
	// one text (FuzzCursor found "AQAA\n…").
	if err != nil || len(b) < 17 || strings.ContainsAny(c, "\r\n") {
		return position{}, badCursor(c)
	}
	if cs.key == nil {
		if len(b) != 17 || b[0] != cursorVersion {
			return position{}, badCursor(c)
		}
	} else if len(b) != 17+cursorTagSize || b[0] != cursorVersionTagged || !hmac.Equal(b[17:], cs.tag(b[:17], reader)) {
		return position{}, badCursor(c)
	}
	p := position{score: int64(binary.BigEndian.Uint64(b[1:])), id: int64(binary.BigEndian.Uint64(b[9:]))}
	if p.score <= 0 || p.score > maxScore || p.id <= 0 {
		return position{}, badCursor(c)
	}
	return p, nil
}

func badCursor(c string) error { return fmt.Errorf("%w: %.40q", ErrCursor, c) }

func (cs cursors) tag(head []byte, reader string) []byte {
	m := hmac.New(sha256.New, cs.key)
	m.Write(head)
	m.Write([]byte(reader))
	return m.Sum(nil)[:cursorTagSize]
}
