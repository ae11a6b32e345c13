package shortlink

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/casebook-dev/casebook/internal/strictjson"
)

// maxBody bounds a JSON request body.
const maxBody = 16 << 10

// errBody is wrapped by malformed request bodies.
var errBody = errors.New("bad JSON")

// readJSON reads r's body, one JSON object, into v (a pointer to a struct)
// with internal/strictjson, so that no proxy or client library reading the
// same bytes can see another request: member names exactly v's json tags
// (encoding/json folds case) and each at most once (it keeps the last),
// valid UTF-8, nothing after the object, every member without omitzero
// present. A body over maxBody is a *http.MaxBytesError.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return readJSONUpTo(w, r, v, maxBody)
}

// readJSONUpTo is readJSON with a body of up to limit bytes.
func readJSONUpTo(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return err
	}
	if err := strictjson.Decode(body, v); err != nil {
		return fmt.Errorf("%w: %w", errBody, err)
	}
	return nil
}
