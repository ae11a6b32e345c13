// Package obs is how the blocks emit OpenTelemetry metrics and spans: one
// duration histogram and one counter per block, keyed by operation and
// outcome, and one span per public operation.
//
// Names follow the OpenTelemetry semantic-conventions style:
//
//	casebook.<block>.operation.duration  histogram, s   {casebook.operation, casebook.outcome[, casebook.reason]}
//	casebook.<block>.operations          counter, {operation}  (same attributes)
//
// and spans "<block>.<operation>" (SpanKind internal) with the outcome as an
// attribute, an error recorded when the outcome is "error". Attribute values
// come from small fixed sets — the operation names a block declares, the
// outcomes below and the refusal reasons each operation declares — never
// from user ids, codes or other caller data, so a metric's series stay few.
//
// Cost: a block given no providers uses the global ones. While the service
// has installed none (otel.SetMeterProvider / SetTracerProvider were never
// called) an operation reads no clock, starts no span and allocates
// nothing: it reads one flag, in Op.Start inlined into the operation
// (1.6 ns for a Start and End, BenchmarkOpUninstalled). The flags are set when a block is made and
// by a check every PollEvery after that, until both providers are
// installed — so a provider installed before the blocks are made (the
// order a service's main usually takes) is used from their first
// operation, and one installed later, at any time, within PollEvery; data
// then flows with no casebook-specific code. Installing a no-op provider
// counts as installing one. (Reading the providers on every operation
// instead cost 20 ns, a seventh of a cached shortlink resolve on this
// machine.)
package obs

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Outcomes: every operation ends in one of these.
const (
	OK       = "ok"       // did what was asked
	Refused  = "refused"  // refused by a rule (sold out, rate limited, duplicate, bad input): not a fault
	Canceled = "canceled" // the caller's context ended first
	Error    = "error"    // failed: a backend error or a bug
)

// Attribute keys.
const (
	KeyOperation = attribute.Key("casebook.operation")
	KeyOutcome   = attribute.Key("casebook.outcome")
	KeyReason    = attribute.Key("casebook.reason")
)

// Scope is the instrumentation scope of every casebook meter and tracer.
const Scope = "github.com/casebook-dev/casebook"

// Until a service installs a provider, otel.GetMeterProvider and
// GetTracerProvider return OpenTelemetry's own delegating ones (types of
// its internal/global package); once one is installed they never return
// those again. A check tells the two apart by the type — not by comparing
// with what it saw at init, which a provider installed in an earlier
// package's init would fool — and sets the flag for good once it is yes.
var metersInstalled, tracersInstalled atomic.Bool

// eitherInstalled is 1 once either flag is set: the one flag a block
// given no provider reads per operation (a raw uint32 read with
// atomic.LoadUint32, which keeps Op.Start within the inlining budget).
var eitherInstalled uint32

// PollEvery is how soon a global provider installed after a block was
// made is seen.
const PollEvery = 100 * time.Millisecond

var polling sync.Once

// watchGlobals checks the global providers now and, unless both are
// installed, starts the check every PollEvery (one timer per process,
// stopped once both are installed; a timer, not a goroutine, so that a
// service's goroutine-leak checks find nothing of casebook's).
func watchGlobals() {
	if checkGlobals() {
		return
	}
	polling.Do(func() { time.AfterFunc(PollEvery, poll) })
}

func poll() {
	if !checkGlobals() {
		time.AfterFunc(PollEvery, poll)
	}
}

// checkGlobals sets the flags of the providers installed and reports
// whether both are.
func checkGlobals() bool {
	m := metersInstalled.Load() || installed(&metersInstalled, otel.GetMeterProvider())
	t := tracersInstalled.Load() || installed(&tracersInstalled, otel.GetTracerProvider())
	return m && t
}

const globalPackage = "go.opentelemetry.io/otel/internal/global"

// installed sets flag when p is not one of OpenTelemetry's delegating
// providers, and reports whether it did.
func installed(flag *atomic.Bool, p any) bool {
	t := reflect.TypeOf(p)
	if t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == globalPackage {
		return false
	}
	flag.Store(true)
	atomic.StoreUint32(&eitherInstalled, 1)
	return true
}

// Block is one block's instruments.
type Block struct {
	name     string
	meters   metric.MeterProvider // nil: the global ones
	tracers  trace.TracerProvider // nil: the global ones
	live     *uint32              // &alwaysLive when a provider was given, else &eitherInstalled
	meter    metric.Meter
	tracer   trace.Tracer
	duration metric.Float64Histogram
	calls    metric.Int64Counter
}

// NewBlock makes block's instruments on mp and tp; nil means the global
// providers, whose instruments forward to a provider installed later
// (seen within PollEvery). A provider's error making an instrument goes to
// OpenTelemetry's error handler (otel.Handle), as the API specifies, and
// the instrument it returned is used all the same: observability never
// stops a block.
func NewBlock(block string, mp metric.MeterProvider, tp trace.TracerProvider) *Block {
	b := &Block{name: block, meters: mp, tracers: tp, live: &eitherInstalled}
	if mp != nil || tp != nil {
		b.live = &alwaysLive
	}
	if mp == nil || tp == nil {
		watchGlobals()
	}
	if mp == nil {
		mp = otel.GetMeterProvider() // a delegating provider until one is set
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	b.meter = mp.Meter(Scope)
	b.tracer = tp.Tracer(Scope)
	var err error
	b.duration, err = b.meter.Float64Histogram("casebook."+block+".operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of "+block+" operations, by operation and outcome."),
		metric.WithExplicitBucketBoundaries(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	Handle(err)
	b.calls, err = b.meter.Int64Counter("casebook."+block+".operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Completed "+block+" operations, by operation and outcome."))
	Handle(err)
	return b
}

// Handle passes a non-nil error from making an instrument or registering
// a callback to OpenTelemetry's error handler.
func Handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

// Meter is the block's meter, for its own instruments (gauges, queues).
func (b *Block) Meter() metric.Meter { return b.meter }

// Tracer is the block's tracer.
func (b *Block) Tracer() trace.Tracer { return b.tracer }

// Metering reports whether metrics are wanted: a provider was given, or
// the service installed a global one.
func (b *Block) Metering() bool {
	return b.meters != nil || metersInstalled.Load()
}

// Tracing reports whether spans are wanted, the same way.
func (b *Block) Tracing() bool {
	return b.tracers != nil || tracersInstalled.Load()
}

// alwaysLive is a Block's flag when it was given a provider (never
// written: a load of it is no race).
var alwaysLive uint32 = 1

// Classify maps an operation's error to its outcome and, for a refusal, a
// reason from the operation's declared set ("" for none).
type Classify func(error) (outcome, reason string)

// RefuseIf classifies an error matching target (errors.Is) as a refusal
// for reason, and every other error as an Error.
func RefuseIf(target error, reason string) Classify { return Refuse(Reason{target, reason}) }

// Reason names a refusal: an error matching Err (errors.Is) is refused
// for the reason Name.
type Reason struct {
	Err  error
	Name string
}

// Refuse classifies an error matching one of reasons — the first that
// matches, so list the more specific first — as a refusal for its name,
// and every other error as an Error.
func Refuse(reasons ...Reason) Classify {
	return func(err error) (string, string) {
		if name, ok := Match(err, reasons); ok {
			return Refused, name
		}
		return Error, ""
	}
}

// Match returns the name of the first of reasons err matches.
func Match(err error, reasons []Reason) (string, bool) {
	for _, r := range reasons {
		if errors.Is(err, r.Err) {
			return r.Name, true
		}
	}
	return "", false
}

// Names lists reasons' names, each once, in order: what an Op declares.
func Names(reasons []Reason) []string {
	var names []string
	for _, r := range reasons {
		if !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	return names
}

// Op is one public operation's instruments.
type Op struct {
	live     *uint32 // its Block's
	b        *Block
	span     string
	classify Classify
	opts     map[[2]string]options
}

type options struct {
	record []metric.RecordOption
	add    []metric.AddOption
	attrs  []attribute.KeyValue
}

// Op declares operation name, whose refusals carry one of reasons;
// classify says which (nil: every error is an Error, context ends
// Canceled). The attribute sets are built here, once, so recording one
// allocates nothing.
func (b *Block) Op(name string, classify Classify, reasons ...string) *Op {
	if classify == nil {
		classify = func(error) (string, string) { return Error, "" }
	}
	o := &Op{live: b.live, b: b, span: b.name + "." + name, classify: classify, opts: map[[2]string]options{}}
	add := func(outcome, reason string) {
		kv := []attribute.KeyValue{KeyOperation.String(name), KeyOutcome.String(outcome)}
		if reason != "" {
			kv = append(kv, KeyReason.String(reason))
		}
		set := attribute.NewSet(kv...)
		o.opts[[2]string{outcome, reason}] = options{
			record: []metric.RecordOption{metric.WithAttributeSet(set)},
			add:    []metric.AddOption{metric.WithAttributeSet(set)},
			attrs:  kv[1:],
		}
	}
	for _, outcome := range []string{OK, Refused, Canceled, Error} {
		add(outcome, "")
	}
	for _, r := range reasons {
		add(Refused, r)
	}
	return o
}

// Call is one operation in flight; End it once. A nil Call — what Start
// returns when neither metrics nor spans are wanted — ends doing nothing.
type Call struct {
	op    *Op
	ctx   context.Context
	span  trace.Span
	start time.Time
}

// Start begins an operation: a span (when tracing) whose context it
// returns, and the start time (when metering). With neither wanted it
// returns ctx and a nil Call, whose End does nothing. (This part inlines
// into the caller; start does the rest.)
func (o *Op) Start(ctx context.Context) (context.Context, *Call) {
	if atomic.LoadUint32(o.live) != 0 {
		return o.start(ctx)
	}
	return ctx, nil
}

// calls recycles Calls: an operation measured allocates none of its own.
var calls = sync.Pool{New: func() any { return new(Call) }}

func (o *Op) start(ctx context.Context) (context.Context, *Call) {
	c := calls.Get().(*Call)
	c.op, c.ctx = o, ctx
	if o.b.Metering() {
		c.start = time.Now()
	}
	if o.b.Tracing() {
		c.ctx, c.span = o.b.tracer.Start(ctx, o.span, trace.WithSpanKind(trace.SpanKindInternal))
	}
	return c.ctx, c
}

// End ends the operation with err's outcome and returns err unchanged, so
// that `return call.End(err)` reads as the plain return. The Call is
// recycled: End it once and do not touch it after.
func (c *Call) End(err error) error {
	if c == nil {
		return err
	}
	return c.end(err)
}

func (c *Call) end(err error) error {
	outcome, reason := OK, ""
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			outcome = Canceled
		} else {
			outcome, reason = c.op.classify(err)
		}
	}
	opts, ok := c.op.opts[[2]string{outcome, reason}]
	if !ok { // a reason the operation did not declare: count it without one
		opts = c.op.opts[[2]string{outcome, ""}]
		if opts.record == nil {
			opts = c.op.opts[[2]string{Error, ""}]
		}
	}
	if !c.start.IsZero() {
		c.op.b.duration.Record(c.ctx, time.Since(c.start).Seconds(), opts.record...)
		c.op.b.calls.Add(c.ctx, 1, opts.add...)
	}
	if c.span != nil {
		c.span.SetAttributes(opts.attrs...)
		if outcome == Error {
			c.span.RecordError(err)
			c.span.SetStatus(codes.Error, outcome)
		}
		c.span.End()
	}
	*c = Call{}
	calls.Put(c)
	return err
}

// Child starts a span under ctx for a step inside an operation (a Redis
// script, a SQL transaction), when tracing; end it with EndChild.
func (b *Block) Child(ctx context.Context, name string) (context.Context, trace.Span) {
	if !b.Tracing() {
		return ctx, nil
	}
	return b.tracer.Start(ctx, b.name+"."+name, trace.WithSpanKind(trace.SpanKindInternal))
}

// EndChild ends a span Child started (nil: none), recording err.
func EndChild(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "error")
	}
	span.End()
}

// Registration is a callback registered for observable instruments, held
// until Close.
type Registration struct {
	mu sync.Mutex
	r  metric.Registration // nil once closed, or when registering failed
}

// Register registers f as the callback of instruments on m; an error goes
// to Handle (and Close then has nothing to undo).
func Register(m metric.Meter, f metric.Callback, instruments ...metric.Observable) *Registration {
	r, err := m.RegisterCallback(f, instruments...)
	Handle(err)
	return &Registration{r: r}
}

// Close unregisters the callback: the instruments stop reporting. Safe to
// call twice, and concurrently.
func (r *Registration) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.r == nil {
		return nil
	}
	err := r.r.Unregister()
	r.r = nil
	return err
}

// Logger is where a block logs what it does in the background (a relay's
// retries, a poison message skipped, a resync, a fenced refund): l with
// the block's name attached, or, when l is nil, a logger that discards
// everything — blocks are silent by default. Nothing on a hot path logs.
func Logger(l *slog.Logger, block string) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.With(slog.String("casebook.block", block))
}
