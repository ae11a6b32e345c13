package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/casebook-dev/casebook/internal/strictjson"
	"github.com/casebook-dev/casebook/outbox"
)

// WireVersion is the format version of the activity messages Encode writes
// and Handle reads.
const WireVersion = 1

// wire is an activity on the wire, publish it keyed by its target (so one
// user's activities keep their order on one partition):
//
//	{"v":1,"id":"like-9","actor":"bob","verb":"like","object":"post:42","target":"alice","time_ms":1764480000000}
type wire struct {
	V      int    `json:"v"`
	ID     string `json:"id"`
	Actor  string `json:"actor"`
	Verb   string `json:"verb"`
	Object string `json:"object"`
	Target string `json:"target"`
	TimeMs int64  `json:"time_ms"`
}

// Encode returns a's wire form (see Handle), refusing what Add would
// refuse whatever the time (ErrInvalid).
func Encode(a Activity) ([]byte, error) {
	if err := validFields(a); err != nil {
		return nil, err
	}
	return json.Marshal(wire{V: WireVersion, ID: a.ID, Actor: a.Actor, Verb: a.Verb, Object: a.Object, Target: a.Target, TimeMs: a.Time.UnixMilli()})
}

// Decode parses a wire-form activity strictly: unknown, duplicated or
// missing members, other versions, bad ids or verbs and times outside
// 2000..9999 are ErrBadMessage, marked outbox.ErrPoison.
func Decode(value []byte) (Activity, error) {
	var w wire
	if err := strictjson.Decode(value, &w); err != nil {
		return Activity{}, badMessage(value, err)
	}
	a := Activity{ID: w.ID, Actor: w.Actor, Verb: w.Verb, Object: w.Object, Target: w.Target, Time: time.UnixMilli(w.TimeMs).UTC()}
	if err := validFields(a); err != nil {
		return Activity{}, badMessage(value, err)
	}
	if w.V != WireVersion || w.TimeMs < minTimeMs || w.TimeMs > maxTimeMs {
		return Activity{}, badMessage(value, fmt.Errorf("version %d, time_ms %d", w.V, w.TimeMs))
	}
	return a, nil
}

// The times a message may carry at all: 2000-01-01 .. 9999-12-31 UTC.
var minTimeMs, maxTimeMs = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).UnixMilli()

func badMessage(value []byte, err error) error {
	return outbox.Poison(fmt.Errorf("%w: %w: %.200q", ErrBadMessage, err, value))
}

// Handle is the activity consumer, an outbox.Handler for kafka.Consumer: it
// decodes the message and Adds it. A malformed message, and one Add
// refuses (its time too far from Now: absurd, or too late to be applied
// exactly once), is poison; a Redis error is transient (retried, which the
// dedupe makes harmless).
func (f *Feed) Handle(ctx context.Context, _, value []byte) (err error) {
	ctx, call := f.obs.handle.Start(ctx)
	defer func() { err = call.End(err) }()
	a, err := Decode(value)
	if err != nil {
		return err
	}
	if err := f.validActivity(a); err != nil {
		return badMessage(value, err)
	}
	_, err = f.add(ctx, a)
	return err
}
