package shortlink

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
)

// The API handler's routes that list an owner's links and make many at once.

type listResponse struct {
	Links      []createResponse `json:"links"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	ctx, call := h.s.obs.list.Start(r.Context())
	var page []*Link
	var next string
	owner, err := h.owner(r)
	var q listQuery
	if err == nil {
		q, err = readListQuery(r)
	}
	if err == nil {
		page, next, err = h.s.list(ctx, owner, ListFilter{Tag: q.tag}, q.cursor, q.n)
	}
	if err != nil {
		writeError(w, err)
	} else {
		res := listResponse{Links: make([]createResponse, len(page)), NextCursor: next}
		for i, l := range page {
			res.Links[i] = createResponse{Link: l, ShortURL: h.s.LinkURL(l)}
		}
		writeJSON(w, http.StatusOK, res)
	}
	call.End(err)
}

type listQuery struct {
	tag, cursor string
	n           int
}

// readListQuery reads tag, cursor and n, each at most once; other
// parameters are the service's (an authorizer may read them).
func readListQuery(r *http.Request) (listQuery, error) {
	var q listQuery
	values := r.URL.Query()
	for _, name := range []string{"tag", "cursor", "n"} {
		v, ok := values[name]
		switch {
		case !ok:
			continue
		case len(v) != 1:
			return q, fmt.Errorf("%w: %s must be given once", ErrInvalidOptions, name)
		case name == "tag":
			q.tag = v[0]
		case name == "cursor":
			q.cursor = v[0]
		default:
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 || n > MaxListPage {
				return q, fmt.Errorf("%w: n %q outside 1..%d", ErrInvalidOptions, v[0], MaxListPage)
			}
			q.n = n
		}
	}
	return q, nil
}

// maxBulkBody bounds a bulk request: MaxBatch links of some 5 KiB each.
const maxBulkBody = 512 << 10

type bulkRequest struct {
	Links []createRequest `json:"links"`
}

type bulkResult struct {
	Status int             `json:"status"`
	Link   *createResponse `json:"link,omitempty"`
	Error  string          `json:"error,omitempty"`
}

func (h *handler) bulk(w http.ResponseWriter, r *http.Request) {
	ctx, call := h.s.obs.shortenMany.Start(r.Context())
	var results []Result
	owner, err := h.owner(r)
	var req bulkRequest
	if err == nil {
		err = readJSONUpTo(w, r, &req, maxBulkBody)
	}
	if err == nil {
		results, err = h.shortenMany(ctx, r, owner, req.Links)
	}
	if err != nil {
		writeError(w, err)
		call.End(err)
		return
	}
	out := make([]bulkResult, len(results))
	for i, res := range results {
		if res.Err != nil {
			out[i].Status, out[i].Error = errorStatus(res.Err)
			continue
		}
		out[i] = bulkResult{Status: http.StatusCreated, Link: &createResponse{Link: res.Link, ShortURL: h.s.LinkURL(res.Link)}}
	}
	writeJSON(w, http.StatusOK, map[string][]bulkResult{"results": out})
	call.End(nil)
}

// shortenMany converts the bulk body's links and makes those that convert;
// a link whose body is refused (a zero TTL, say) is not sent, and its
// result is the refusal.
func (h *handler) shortenMany(ctx context.Context, r *http.Request, owner string, links []createRequest) ([]Result, error) {
	results := make([]Result, len(links))
	var reqs []Request
	var sent []int // reqs[j] is links[sent[j]]
	for i, c := range links {
		o, err := c.options()
		if err != nil {
			results[i].Err = err
			continue
		}
		o.ClientIP, o.Owner = h.clientIP(r), owner
		reqs, sent = append(reqs, Request{URL: c.URL, Options: o}), append(sent, i)
	}
	if err := checkBatch(len(links)); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return results, nil
	}
	made, err := h.s.shortenMany(ctx, reqs)
	if err != nil {
		return nil, err
	}
	for j, res := range made {
		results[sent[j]] = res
	}
	return results, nil
}
