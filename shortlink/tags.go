package shortlink

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of a link's tags (Options.Tags, Update.Tags).
const (
	MaxTags   = 10 // tags per link
	MaxTagLen = 64 // bytes of one tag, after normalisation
)

// normalizeTags returns tags as a link stores them: each trimmed of
// surrounding white space and lower-cased (strings.ToLower), the list
// de-duplicated and sorted. A tag that is empty after trimming, longer than
// MaxTagLen bytes, not UTF-8 or holding a control character is
// ErrInvalidOptions, and so are more than MaxTags distinct tags. nil stays
// nil.
func normalizeTags(tags []string) ([]string, error) {
	if tags == nil {
		return nil, nil
	}
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		n, err := normalizeTag(t)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > MaxTags {
		return nil, fmt.Errorf("%w: %d tags (at most %d)", ErrInvalidOptions, len(out), MaxTags)
	}
	return out, nil
}

// normalizeTag normalises one tag as normalizeTags does.
func normalizeTag(tag string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: tag %.64q %s", ErrInvalidOptions, tag, why)
	}
	if !utf8.ValidString(tag) {
		return "", bad("is not UTF-8")
	}
	t := strings.ToLower(strings.TrimSpace(tag))
	switch {
	case t == "":
		return "", bad("is empty")
	case len(t) > MaxTagLen:
		return "", bad(fmt.Sprintf("is over %d bytes", MaxTagLen))
	case strings.ContainsFunc(t, unicode.IsControl):
		return "", bad("holds a control character")
	}
	return t, nil
}

// tagsColumnType is the type of a link's tags column (and of a history
// row's old_tags and new_tags): the normalised tags joined by tagSep, a
// control character no tag holds, compared byte for byte; Migrate adds
// the columns to tables made before them.
func tagsColumnType(mysql bool) string {
	if mysql {
		return "VARBINARY(1024) NOT NULL DEFAULT ''"
	}
	return "VARCHAR(1024) NOT NULL DEFAULT ''"
}

const tagSep = "\n"

func joinTags(tags []string) string { return strings.Join(tags, tagSep) }

func splitTags(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, tagSep)
}
