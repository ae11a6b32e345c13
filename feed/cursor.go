package feed

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
)

// cursorVersion is the first byte of every cursor.
const cursorVersion = 1

// position is a place in a timeline: the (score, id) of the last post shown.
// Timelines are ordered by score, then by the id's decimal text, both
// descending (the order Redis returns sorted-set members of equal score in).
type position struct {
	score int64
	id    int64
}

var cursorEncoding = base64.RawURLEncoding.Strict()

// encodeCursor makes the opaque cursor of p: base64url of a version byte,
// the score and the id, big-endian.
func encodeCursor(p position) string {
	var b [17]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:], uint64(p.score))
	binary.BigEndian.PutUint64(b[9:], uint64(p.id))
	return cursorEncoding.EncodeToString(b[:])
}

// decodeCursor parses a cursor made by encodeCursor; anything else is
// ErrCursor.
func decodeCursor(c string) (position, error) {
	b, err := cursorEncoding.DecodeString(c)
	if err != nil || len(b) != 17 || b[0] != cursorVersion {
		return position{}, fmt.Errorf("%w: %.40q", ErrCursor, c)
	}
	p := position{score: int64(binary.BigEndian.Uint64(b[1:])), id: int64(binary.BigEndian.Uint64(b[9:]))}
	if p.score <= 0 || p.score > maxScore || p.id <= 0 {
		return position{}, fmt.Errorf("%w: %.40q", ErrCursor, c)
	}
	return p, nil
}
