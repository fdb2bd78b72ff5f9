package critbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gonixl/gonixl/examples/loadgen"
	"github.com/gonixl/gonixl/internal/latency"
)

// Report is what one run measured.
type Report struct {
	Config Config
	// Done and Failed count requests that ended on every decode rank;
	// FirstError is the first failure's error.
	Done, Failed int
	FirstError   error
	// BytesMoved is what the transfers moved (summed over ranks);
	// BytesVerified what decode checked byte for byte afterwards.
	BytesMoved    uint64
	BytesVerified uint64
	// Critical is, per done request, the time from the first
	// RequestFinished call on prefill to the decode engine loop seeing the
	// request's result on its last rank.
	Critical latency.Summary
	// EngineLoop is, per request, the time the engines' loops spent inside
	// connector calls for it: Register (push) or Load (pull) on every
	// decode rank, RequestFinished on every prefill rank, and its share of
	// the Drain call that returned its result.
	EngineLoop latency.Summary
	// ConfirmMean is the mean round trip of pull's confirmations (the
	// side-channel exchange after the READ that a pull load waits for),
	// measured in the run; zero for push.
	ConfirmMean time.Duration
	// Wall is the run's duration, arrivals to last result.
	Wall time.Duration
}

// decodeLoopNap is how long the simulated decode engine loop sleeps when a
// Drain returned nothing: short, so the loop's own cadence hardly adds to
// the critical path, for both modes alike. It sleeps with nanosleep because
// the Go runtime's timers here wake about 1 ms late.
const decodeLoopNap = 50 * time.Microsecond

func nap(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}

// Run builds the cluster, runs cfg.Requests requests through it, verifies
// decode's bytes and tears everything down.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	rep.Config = cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	c, err := newCluster(cfg)
	if err != nil {
		return rep, err
	}
	defer func() { err = errors.Join(err, c.close()) }()

	n := cfg.Requests
	ids := make([]string, n)
	index := make(map[string]int, n)
	for i := range ids {
		ids[i] = "req-" + strconv.Itoa(i)
		index[ids[i]] = i
		for r := range c.preLayouts {
			if err := fill(&c.preLayouts[r], c.blocksOf(i), i); err != nil {
				return rep, err
			}
		}
	}
	finishedAt := make([]atomic.Int64, n) // unix nanos of the first RequestFinished
	loopNanos := make([]atomic.Int64, n)
	var submitErr error
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { submitErr = err; cancel() }) }

	// The decode engine loop: drain results, time them.
	var critical, engineLoop []time.Duration
	ranksDone := make([]int, n)
	failed := make([]bool, n)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		ended := 0
		for ended < n && ctx.Err() == nil {
			t0 := time.Now()
			outs := c.drainDecode()
			d := time.Since(t0)
			if len(outs) == 0 {
				nap(decodeLoopNap)
				continue
			}
			share := int64(d) / int64(len(outs))
			now := time.Now()
			for _, o := range outs {
				i, ok := index[o.id]
				if !ok {
					continue
				}
				loopNanos[i].Add(share)
				if o.err != nil && !failed[i] {
					failed[i] = true
					rep.Failed++
					if rep.FirstError == nil {
						rep.FirstError = fmt.Errorf("request %s: %w", o.id, o.err)
					}
				}
				ranksDone[i]++
				if ranksDone[i] == cfg.DecodeTP {
					ended++
					if !failed[i] {
						rep.Done++
						critical = append(critical, now.Sub(time.Unix(0, finishedAt[i].Load())))
					}
				}
			}
		}
	}()
	// The prefill engine loop: free what the connector hands back.
	var freed atomic.Int64
	prefillDone := make(chan struct{})
	stopPrefill := make(chan struct{})
	go func() {
		defer close(prefillDone)
		t := time.NewTicker(500 * time.Microsecond)
		defer t.Stop()
		for {
			freed.Add(int64(c.drainFreed()))
			select {
			case <-stopPrefill:
				return
			case <-t.C:
			}
		}
	}()

	start := time.Now()
	var pending sync.WaitGroup
	genErr := loadgen.Run(ctx, loadgen.Arrivals{Rate: cfg.Rate}, n, func(i int) {
		t0 := time.Now()
		if err := c.arrive(ids[i], i); err != nil {
			fail(err)
			return
		}
		loopNanos[i].Add(int64(time.Since(t0)))
		pending.Add(1)
		time.AfterFunc(cfg.PrefillTime, func() {
			defer pending.Done()
			t0 := time.Now()
			finishedAt[i].Store(t0.UnixNano())
			load, err := c.finish(ids[i], i)
			if err != nil {
				fail(err)
				return
			}
			loopNanos[i].Add(int64(time.Since(t0)))
			if load == nil {
				return
			}
			pending.Add(1)
			time.AfterFunc(cfg.Handoff, func() {
				defer pending.Done()
				t0 := time.Now()
				if err := load(); err != nil {
					fail(err)
					return
				}
				loopNanos[i].Add(int64(time.Since(t0)))
			})
		})
	})
	pending.Wait()
	<-loopDone
	rep.Wall = time.Since(start)
	// Prefill frees every request on every rank once decode has it.
	want := int64(n * cfg.PrefillTP)
	for freed.Load() < want && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	close(stopPrefill)
	<-prefillDone
	switch {
	case submitErr != nil:
		return rep, submitErr
	case genErr != nil:
		return rep, genErr
	case ctx.Err() != nil:
		return rep, fmt.Errorf("critbench: %s run incomplete after %v: %d done, %d failed of %d, %d of %d holds freed",
			cfg.Mode, cfg.Timeout, rep.Done, rep.Failed, n, freed.Load(), want)
	}
	rep.BytesMoved = c.bytesMoved()
	rep.ConfirmMean = c.confirmMean()
	for i := range n {
		if failed[i] {
			continue
		}
		for r := range c.decLayouts {
			v, err := verify(&c.decLayouts[r], c.blocksOf(i), i)
			rep.BytesVerified += v
			if err != nil {
				return rep, fmt.Errorf("critbench: %s decode rank %d: %w", cfg.Mode, r, err)
			}
		}
		engineLoop = append(engineLoop, time.Duration(loopNanos[i].Load()))
	}
	rep.Critical = latency.Summarize(critical)
	rep.EngineLoop = latency.Summarize(engineLoop)
	return rep, nil
}

// String formats the report as one line.
func (r Report) String() string {
	return fmt.Sprintf("%-11s done %d/%d failed %d  moved %d B verified %d B  critical p50 %v p99 %v  engine-loop p50 %v p99 %v",
		r.Config.Mode, r.Done, r.Config.Requests, r.Failed, r.BytesMoved, r.BytesVerified,
		r.Critical.P50, r.Critical.P99, r.EngineLoop.P50, r.EngineLoop.P99)
}
