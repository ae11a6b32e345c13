package shortlink_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/makiuchi-d/gozxing"
	gzqr "github.com/makiuchi-d/gozxing/qrcode"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// decodeQR reads the text of the QR code in img with ZXing's decoder (an
// implementation independent of the encoder's).
func decodeQR(t *testing.T, img image.Image) string {
	t.Helper()
	bmp, err := gozxing.NewBinaryBitmapFromImage(img)
	if err != nil {
		t.Fatal(err)
	}
	res, err := gzqr.NewQRCodeReader().Decode(bmp, nil)
	if err != nil {
		t.Fatalf("no QR code read: %v", err)
	}
	return res.GetText()
}

var (
	svgSize = regexp.MustCompile(`^<svg xmlns="http://www.w3.org/2000/svg" width="(\d+)" height="(\d+)" viewBox="0 0 (\d+) (\d+)"`)
	svgRun  = regexp.MustCompile(`M(\d+) (\d+)h(\d+)v1h-(\d+)z`)
)

// rasterSVG draws the SVG's runs of dark modules, 4 pixels a module.
func rasterSVG(t *testing.T, svg []byte) (image.Image, int) {
	t.Helper()
	m := svgSize.FindSubmatch(svg)
	if m == nil {
		t.Fatalf("not the SVG expected: %.120s", svg)
	}
	size, _ := strconv.Atoi(string(m[1]))
	n, _ := strconv.Atoi(string(m[3]))
	img := image.NewGray(image.Rect(0, 0, 4*n, 4*n))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	for _, r := range svgRun.FindAllSubmatch(svg, -1) {
		x, _ := strconv.Atoi(string(r[1]))
		y, _ := strconv.Atoi(string(r[2]))
		w, _ := strconv.Atoi(string(r[3]))
		for px := 4 * x; px < 4*(x+w); px++ {
			for py := 4 * y; py < 4*(y+1); py++ {
				img.SetGray(px, py, color.Gray{})
			}
		}
	}
	return img, size
}

func TestQRCodes(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Now: clk.Now})
	srv := httptest.NewServer(s.RedirectHandler(nil))
	defer srv.Close()
	l, err := s.Shorten(ctx, "https://example.com/qr", shortlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(query string) (*http.Response, []byte) {
		res, err := http.Get(srv.URL + "/" + l.Code + "/qr" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	for _, size := range []int{shortlink.MinQRSize, shortlink.DefaultQRSize, shortlink.MaxQRSize} {
		for range 2 { // rendered, then from the cache
			res, b := fetch("?size=" + strconv.Itoa(size))
			if res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/png" {
				t.Fatalf("PNG %d: %d %s", size, res.StatusCode, res.Header.Get("Content-Type"))
			}
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if got := img.Bounds().Dx(); got != size || img.Bounds().Dy() != size {
				t.Errorf("PNG of size %d is %v", size, img.Bounds())
			}
			if size >= shortlink.DefaultQRSize { // 64 px leaves under 2 px a module: readable by phones, not by this decoder
				if got := decodeQR(t, img); got != s.ShortURL(l.Code) {
					t.Errorf("PNG %d reads %q, want %q", size, got, s.ShortURL(l.Code))
				}
			}
			res, b = fetch("?format=svg&size=" + strconv.Itoa(size))
			if res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/svg+xml" {
				t.Fatalf("SVG %d: %d %s", size, res.StatusCode, res.Header.Get("Content-Type"))
			}
			svg, drawn := rasterSVG(t, b)
			if drawn != size {
				t.Errorf("SVG drawn at %d, want %d", drawn, size)
			}
			if got := decodeQR(t, svg); got != s.ShortURL(l.Code) {
				t.Errorf("SVG reads %q, want %q", got, s.ShortURL(l.Code))
			}
		}
	}
	for _, q := range []string{"?size=63", "?size=1025", "?size=x", "?format=gif", "?format=PNG", "?format=png&format=svg", "?size=256&size=512"} {
		if res, _ := fetch(q); res.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", q, res.StatusCode)
		}
	}
	if st, err := s.Stats(ctx, l.Code); err != nil || st.Clicks != 0 {
		t.Errorf("stats after QR codes: %+v, %v; want 0 clicks", st, err)
	}
	if _, err := s.QRCode(ctx, "nosuchcode", shortlink.QRPNG, 256, shortlink.ResolveOptions{}); !errors.Is(err, shortlink.ErrNotFound) {
		t.Errorf("QR of a missing code: %v, want ErrNotFound", err)
	}
	once, err := s.Shorten(ctx, "https://example.com/once", shortlink.Options{TTL: time.Minute, MaxVisits: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.QRCode(ctx, once.Code, shortlink.QRSVG, 256, shortlink.ResolveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, once.Code); err != nil { // the one visit: the QR code spent none
		t.Fatalf("the visit after a QR code: %v", err)
	}
	if _, err := s.QRCode(ctx, once.Code, shortlink.QRSVG, 256, shortlink.ResolveOptions{}); !errors.Is(err, shortlink.ErrExpired) {
		t.Errorf("QR of a used-up link: %v, want ErrExpired (even cached)", err)
	}
	if err := s.Delete(ctx, l.Code); err != nil {
		t.Fatal(err)
	}
	if res, _ := fetch(""); res.StatusCode != 404 {
		t.Errorf("QR of a deleted link: %d, want 404 (the image was cached)", res.StatusCode)
	}
}
