package shortlink

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/skip2/go-qrcode"
)

// QRFormat is the image format of a link's QR code.
type QRFormat string

const (
	QRPNG QRFormat = "png" // image/png, size × size pixels
	QRSVG QRFormat = "svg" // image/svg+xml, drawn size × size
)

// QR code sizes, in pixels: QRCode refuses others (ErrInvalidOptions).
const (
	MinQRSize     = 64
	MaxQRSize     = 1024
	DefaultQRSize = 256
)

// QRCode returns a QR code of code's short URL (ShortURL), in format, size
// pixels square (MinQRSize..MaxQRSize), with medium error correction (15%
// of the symbol can be lost) and the standard 4-module quiet zone. The
// link is looked up as a HEAD redirect is — no click counted, no visit
// spent —, so a missing, deleted or expired link has no QR code
// (ErrNotFound, ErrExpired), and opts.ClientIP holds the caller to the miss
// limit as ResolveWith does. Images are kept in process memory (at most
// 4 MB of them, LocalTTL long) once rendered: the code's short URL never
// changes, only whether the link still exists, which is asked every time.
func (s *Service) QRCode(ctx context.Context, code string, format QRFormat, size int, opts ResolveOptions) (_ []byte, err error) {
	ctx, call := s.obs.qr.Start(ctx)
	defer func() { err = call.End(err) }()
	if format != QRPNG && format != QRSVG {
		return nil, fmt.Errorf("%w: QR format %q (png or svg)", ErrInvalidOptions, format)
	}
	if size < MinQRSize || size > MaxQRSize {
		return nil, fmt.Errorf("%w: QR size %d (%d..%d)", ErrInvalidOptions, size, MinQRSize, MaxQRSize)
	}
	opts.Peek = true
	if _, err := s.resolveWith(ctx, code, opts); err != nil {
		return nil, err
	}
	key := string(format) + ":" + strconv.Itoa(size) + ":" + code
	cache := s.qrCache()
	if cache != nil {
		if img, ok := cache.Get(key); ok {
			return img, nil
		}
	}
	q, err := qrcode.New(s.ShortURL(code), qrcode.Medium)
	if err != nil {
		return nil, fmt.Errorf("shortlink: QR code of %s: %w", code, err)
	}
	var img []byte
	if format == QRPNG {
		if img, err = q.PNG(size); err != nil {
			return nil, fmt.Errorf("shortlink: QR code of %s: %w", code, err)
		}
	} else {
		img = qrSVG(q.Bitmap(), size)
	}
	if cache != nil {
		cache.SetWithTTL(key, img, int64(len(img)), s.cfg.LocalTTL)
	}
	return img, nil
}

// qrCache returns the QR image cache, made on first use (nil with the
// local cache off, or when it cannot be made: images are then rendered
// every time).
func (s *Service) qrCache() *ristretto.Cache[string, []byte] {
	if s.cfg.LocalTTL <= 0 {
		return nil
	}
	s.qrMu.Lock()
	defer s.qrMu.Unlock()
	if s.qrs == nil && !s.closed.Load() {
		s.qrs, _ = ristretto.NewCache(&ristretto.Config[string, []byte]{NumCounters: 20_000, MaxCost: 4 << 20, BufferItems: 64})
	}
	return s.qrs
}

// qrSVG draws bitmap (true: a dark module, quiet zone included) as one
// path of horizontal runs, size × size.
func qrSVG(bitmap [][]bool, size int) []byte {
	n := len(bitmap)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" shape-rendering="crispEdges">`, size, size, n, n)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/><path fill="#000" d="`, n, n)
	for y, row := range bitmap {
		for x := 0; x < len(row); {
			if !row[x] {
				x++
				continue
			}
			run := 0
			for x+run < len(row) && row[x+run] {
				run++
			}
			fmt.Fprintf(&b, "M%d %dh%dv1h-%dz", x, y, run, run)
			x += run
		}
	}
	b.WriteString(`"/></svg>`)
	return []byte(b.String())
}
