package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sessions mints and checks the bearer tokens that say who a buyer is:
// "<user>.<expiry>.<MAC>", the user base64url, the expiry in Unix seconds
// and the MAC HMAC-SHA256(key, "v1\n" + user + "\n" + expiry), base64url.
// A real shop gets its tokens from its login service, which shares the key
// (or signs with its own and the shop verifies); this example mints them
// for its load generator and tests (Shop.Token). Every read and write of a
// buyer's orders is scoped to the token's user: another user's order is
// 404, as if it did not exist, so ids are not confirmed.
type sessions struct {
	key []byte
	now func() time.Time
}

var errSession = errors.New("no valid session")

func (s sessions) mac(user string, exp int64) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("v1\n" + user + "\n" + strconv.FormatInt(exp, 10)))
	return m.Sum(nil)
}

// mint returns user's token, valid for ttl.
func (s sessions) mint(user string, ttl time.Duration) string {
	exp := s.now().Add(ttl).Unix()
	return base64.RawURLEncoding.EncodeToString([]byte(user)) + "." + strconv.FormatInt(exp, 10) + "." +
		base64.RawURLEncoding.EncodeToString(s.mac(user, exp))
}

// caller returns the user of r's "Authorization: Bearer" token.
func (s sessions) caller(r *http.Request) (string, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") { // the scheme is case-insensitive (RFC 7235)
		return "", errSession
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errSession
	}
	user, err1 := base64.RawURLEncoding.Strict().DecodeString(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	mac, err3 := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || parts[1] != strconv.FormatInt(exp, 10) ||
		!hmac.Equal(mac, s.mac(string(user), exp)) || s.now().Unix() >= exp || len(user) == 0 || len(user) > 64 {
		return "", errSession
	}
	return string(user), nil
}

// authenticated wraps a buyer's handler: no valid session is 401.
func (s *Shop) authenticated(h func(w http.ResponseWriter, r *http.Request, user string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user, err := s.sessions.caller(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shop"`)
			reply(w, http.StatusUnauthorized, map[string]string{"error": err.Error()})
			return
		}
		h(w, r, user)
	}
}

// Token mints a session token for user, valid for ttl, as the shop's login
// service would.
func (s *Shop) Token(user string, ttl time.Duration) string { return s.sessions.mint(user, ttl) }
