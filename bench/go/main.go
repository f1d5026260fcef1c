// Command gobench runs goro's benchmark workloads on Go's own runtime, so that
// bench/compare.sh can put the two side by side. It uses the standard library
// only.
//
//	gobench -procs=N [-benchtime=300ms] [-filter=REGEXP]   micro-benchmarks
//	gobench -procs=N -rss [-n=1000000]                      memory per parked goroutine
//
// Every result is one JSON object per line on stdout:
//
//	{"impl":"go","name":"yield","procs":1,"value":84.2,"unit":"ns/yield","iters":...}
//
// The workloads mirror bench/goro_bench.cc and bench/goro_rss.cc one for one;
// when you change one side, change the other.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Batch sizes shared with goro_bench.cc.
const (
	spawnBatch      = 10000 // goroutines spawned (and joined) per iteration
	mutexWorkers    = 4     // goroutines contending for the mutex
	mutexOpsPerGo   = 2500  // lock/unlock pairs per worker per iteration
	fibN            = 27
	fibWant         = 196418
	bufferedChanCap = 128

	condWaiters         = 10000  // goroutines waiting on the sync.Cond
	closeWakeGoroutines = 100000 // goroutines blocked on the closed channel
	yieldManyGoroutines = 10000
	yieldManyRounds     = 20 // Goscheds per goroutine per iteration
	syscallGoroutines   = 200
	syscallsPerGo       = 10      // blocking calls per goroutine per iteration
	syscallSleepNs      = 2000000 // each call is a 2 ms nanosleep

	rwMutexWorkers    = 4    // goroutines sharing the RWMutex
	rwMutexOpsPerGo   = 2560 // lock/unlock pairs per worker per iteration
	rwMutexWriteEvery = 64   // one in this many is Lock; the others RLock
)

type result struct {
	Impl  string  `json:"impl"`
	Name  string  `json:"name"`
	Procs int     `json:"procs"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	Iters int     `json:"iters,omitempty"`
	// Process CPU time (user+system, every thread) per op in Unit, of the
	// last (reported) run; nil when not measured.
	CPUValue *float64 `json:"cpu_value,omitempty"`
	Extra    string   `json:"extra,omitempty"`
}

// processCPU returns the user+system CPU time of the whole process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func emit(r result) {
	r.Impl = "go"
	b, err := json.Marshal(r)
	if err != nil {
		fatalf("json: %v", err)
	}
	fmt.Println(string(b))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gobench: "+format+"\n", args...)
	os.Exit(1)
}

// A workload: its name, the procs counts it is meant for, how many operations
// one b.N iteration performs, the unit of the reported figure, and the scale
// from ns/op to that unit.
type workload struct {
	name       string
	procs      []int
	opsPerIter float64
	unit       string
	scale      float64 // reported value = ns per op * scale
	fn         func(b *testing.B)
}

// Set by a workload that counts its operations itself (its last run wins).
var opsPerIterOverride float64

var workloads = []workload{
	{"spawn_complete", []int{1, 2}, spawnBatch, "ns/goroutine", 1, benchSpawn},
	{"yield", []int{1}, 2, "ns/yield", 1, benchYield},
	{"chan_unbuffered_pingpong", []int{1}, 1, "ns/roundtrip", 1, benchPingPong},
	{"chan_buffered128", []int{1, 2}, 1, "ns/element", 1, benchBuffered},
	{"mutex_contended4", []int{2}, mutexWorkers * mutexOpsPerGo, "ns/lock+unlock", 1, benchMutex},
	{"rwmutex_read_mostly", []int{2}, rwMutexWorkers * rwMutexOpsPerGo, "ns/lock+unlock", 1, benchRWMutex},
	{"waitgroup_add_done_wait", []int{1, 2}, 1, "ns/op", 1, benchWaitGroup},
	{"fib27_goroutines", []int{1, 2}, 1, "ms/run", 1e-6, benchFib},
	{"condvar_signalall", []int{1, 2}, condWaiters, "ns/wake", 1, benchCondBroadcast},
	{"chan_close_wake", []int{1, 2}, closeWakeGoroutines, "ns/goroutine", 1, benchCloseWake},
	{"yield_many", []int{1, 2}, yieldManyGoroutines * yieldManyRounds, "ns/yield", 1, benchYieldMany},
	{"timer_reset", []int{1}, 1, "ns/reset", 1, benchTimerReset},
	{"syscall_turns", []int{1, 2}, 1, "ms/run", 1e-6, benchSyscallTurns},
}

// spawn_complete: start spawnBatch goroutines that only call wg.Done, then
// wait for all of them.
func benchSpawn(b *testing.B) {
	var wg sync.WaitGroup
	for i := 0; i < b.N; i++ {
		wg.Add(spawnBatch)
		for j := 0; j < spawnBatch; j++ {
			go func() { wg.Done() }()
		}
		wg.Wait()
	}
}

// yield: this goroutine and a partner both call runtime.Gosched in a loop on
// one P. Reported per Gosched, counting both goroutines' calls (the partner
// counts its own; with strict alternation that is two per iteration).
func benchYield(b *testing.B) {
	var stop atomic.Bool
	var done sync.WaitGroup
	var partnerYields int // written by the partner before done.Done()
	done.Add(1)
	go func() {
		n := 0
		for !stop.Load() {
			runtime.Gosched()
			n++
		}
		partnerYields = n
		done.Done()
	}()
	runtime.Gosched() // let the partner reach its loop
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.Gosched()
	}
	b.StopTimer()
	stop.Store(true)
	done.Wait()
	opsPerIterOverride = float64(b.N+partnerYields) / float64(b.N)
	if partnerYields < b.N/2 {
		fatalf("yield: the partner yielded %d times while we yielded %d: Gosched does not alternate",
			partnerYields, b.N)
	}
}

// chan_unbuffered_pingpong: one round trip per iteration over two unbuffered
// channels.
func benchPingPong(b *testing.B) {
	ping, pong := make(chan int), make(chan int)
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
		done.Done()
	}()
	b.ResetTimer()
	x := 0
	for i := 0; i < b.N; i++ {
		ping <- x
		x = <-pong
	}
	b.StopTimer()
	close(ping)
	done.Wait()
	if x != b.N {
		fatalf("pingpong: got %d round trips, want %d", x, b.N)
	}
}

// chan_buffered128: a producer goroutine sends b.N values through a channel
// with room for 128; this goroutine receives them.
func benchBuffered(b *testing.B) {
	ch := make(chan int64, bufferedChanCap)
	n := b.N
	go func() {
		for i := 0; i < n; i++ {
			ch <- int64(i)
		}
		close(ch)
	}()
	b.ResetTimer()
	var sum int64
	for i := 0; i < n; i++ {
		sum += <-ch
	}
	b.StopTimer()
	if _, ok := <-ch; ok {
		fatalf("buffered: channel not drained")
	}
	if want := int64(n) * int64(n-1) / 2; sum != want {
		fatalf("buffered: sum %d, want %d", sum, want)
	}
}

// mutex_contended4: mutexWorkers goroutines each increment a shared counter
// mutexOpsPerGo times under one sync.Mutex.
func benchMutex(b *testing.B) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	counter := 0
	for i := 0; i < b.N; i++ {
		wg.Add(mutexWorkers)
		for w := 0; w < mutexWorkers; w++ {
			go func() {
				for k := 0; k < mutexOpsPerGo; k++ {
					mu.Lock()
					counter++
					mu.Unlock()
				}
				wg.Done()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	if want := b.N * mutexWorkers * mutexOpsPerGo; counter != want {
		fatalf("mutex: counter %d, want %d", counter, want)
	}
}

// rwmutex_read_mostly: rwMutexWorkers goroutines share one sync.RWMutex and
// rwMutexWorkers counters. Each does rwMutexOpsPerGo operations: one in
// rwMutexWriteEvery takes Lock and increments its own counter, the others
// take RLock and sum all the counters.
func benchRWMutex(b *testing.B) {
	var mu sync.RWMutex
	var wg sync.WaitGroup
	var counters [rwMutexWorkers]int64
	var seen [rwMutexWorkers]int64 // each worker's sum of what it read
	for i := 0; i < b.N; i++ {
		wg.Add(rwMutexWorkers)
		for w := 0; w < rwMutexWorkers; w++ {
			go func(w int) {
				var sum int64
				for k := 0; k < rwMutexOpsPerGo; k++ {
					if k%rwMutexWriteEvery == 0 {
						mu.Lock()
						counters[w]++
						mu.Unlock()
					} else {
						mu.RLock()
						for j := range counters {
							sum += counters[j]
						}
						mu.RUnlock()
					}
				}
				seen[w] += sum
				wg.Done()
			}(w)
		}
		wg.Wait()
	}
	b.StopTimer()
	rwMutexSink = seen
	var writes int64
	for _, c := range counters {
		writes += c
	}
	if want := int64(b.N) * rwMutexWorkers * (rwMutexOpsPerGo / rwMutexWriteEvery); writes != want {
		fatalf("rwmutex: counters sum to %d, want %d", writes, want)
	}
}

// rwMutexSink keeps what benchRWMutex's readers read, so that the reads stay.
var rwMutexSink [rwMutexWorkers]int64

// waitgroup_add_done_wait: Add(1), Done(), Wait() on one goroutine; Wait never
// blocks, so this is the cost of the three calls.
func benchWaitGroup(b *testing.B) {
	var wg sync.WaitGroup
	for i := 0; i < b.N; i++ {
		wg.Add(1)
		wg.Done()
		wg.Wait()
	}
}

// fib spawns a goroutine for each of fib(n-1) and fib(n-2) and joins them with
// a WaitGroup.
func fib(n int) int64 {
	if n < 2 {
		return int64(n)
	}
	var a, c int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { a = fib(n - 1); wg.Done() }()
	go func() { c = fib(n - 2); wg.Done() }()
	wg.Wait()
	return a + c
}

var fibSink int64

func benchFib(b *testing.B) {
	for i := 0; i < b.N; i++ {
		v := fib(fibN)
		if v != fibWant {
			fatalf("fib(%d) = %d, want %d", fibN, v, fibWant)
		}
		fibSink += v
	}
}

// condvar_signalall: condWaiters goroutines wait on one sync.Cond under one
// sync.Mutex. One iteration is one round: Broadcast wakes them all, each takes
// the Mutex, counts itself in and waits again, and the last one in signals
// this goroutine. The waiters are started, and wait a first time, before the
// timed loop; a last untimed round lets them end. Every waiter must have woken
// once per round.
func benchCondBroadcast(b *testing.B) {
	var mu sync.Mutex
	cv := sync.NewCond(&mu)    // the waiters wait here for the next round
	allIn := sync.NewCond(&mu) // this goroutine waits here for the last waiter
	var round int64            // guarded by mu
	arrived := 0               // guarded by mu: waiters waiting in this round
	stop := false              // guarded by mu
	var wakes int64            // guarded by mu: rounds seen, over all waiters
	var done sync.WaitGroup
	done.Add(condWaiters)
	for i := 0; i < condWaiters; i++ {
		go func() {
			mu.Lock()
			for {
				mine := round
				arrived++
				if arrived == condWaiters {
					allIn.Signal()
				}
				for round == mine {
					cv.Wait()
				}
				wakes++
				if stop {
					break
				}
			}
			mu.Unlock()
			done.Done()
		}()
	}
	mu.Lock()
	for arrived < condWaiters {
		allIn.Wait()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		arrived = 0
		round++
		cv.Broadcast()
		for arrived < condWaiters {
			allIn.Wait()
		}
	}
	b.StopTimer()
	stop = true
	round++
	cv.Broadcast()
	mu.Unlock()
	done.Wait()
	if want := int64(b.N+1) * condWaiters; wakes != want {
		fatalf("condvar: %d wake-ups counted, want %d", wakes, want)
	}
}

// chan_close_wake: closeWakeGoroutines goroutines each block receiving on one
// unbuffered channel; close wakes them all and each ends with wg.Done. Per
// goroutine, from the close to the last Done. Starting them and letting them
// block is not timed (the timer is stopped, and a 20 ms sleep lets the last
// ones reach the receive). Every receive must see the channel closed.
func benchCloseWake(b *testing.B) {
	var gotValue atomic.Int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ch := make(chan int)
		var ready, done sync.WaitGroup
		ready.Add(closeWakeGoroutines)
		done.Add(closeWakeGoroutines)
		for j := 0; j < closeWakeGoroutines; j++ {
			go func() {
				ready.Done()
				if _, ok := <-ch; ok {
					gotValue.Add(1)
				}
				done.Done()
			}()
		}
		ready.Wait()
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
		close(ch)
		done.Wait()
	}
	b.StopTimer()
	if n := gotValue.Load(); n != 0 {
		fatalf("close_wake: %d receives got a value from a channel nobody sent on", n)
	}
}

// yield_many: one iteration starts yieldManyGoroutines goroutines that each
// call runtime.Gosched yieldManyRounds times, and waits for them. Per Gosched
// (the spawns and the join are included). Each goroutine notes whether
// another started while it yielded; if fewer than half did, Gosched did not
// switch.
func benchYieldMany(b *testing.B) {
	var started, overtaken atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < b.N; i++ {
		wg.Add(yieldManyGoroutines)
		for j := 0; j < yieldManyGoroutines; j++ {
			go func() {
				me := started.Add(1)
				for k := 0; k < yieldManyRounds; k++ {
					runtime.Gosched()
				}
				if started.Load() != me {
					overtaken.Add(1)
				}
				wg.Done()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	if total := int64(b.N) * yieldManyGoroutines; overtaken.Load() < total/2 {
		fatalf("yield_many: only %d of %d goroutines saw another start while they yielded: "+
			"Gosched does not switch", overtaken.Load(), total)
	}
}

// timer_reset: one goroutine resets one pending time.Timer to a minute from
// now, over and over. Per Reset. Every Reset, and the final Stop, must find
// the timer pending.
func benchTimerReset(b *testing.B) {
	t := time.NewTimer(time.Minute)
	notPending := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !t.Reset(time.Minute) {
			notPending++
		}
	}
	b.StopTimer()
	if !t.Stop() || notPending != 0 {
		fatalf("timer_reset: %d Resets, or the Stop, found a timer that was not pending", notPending)
	}
}

// syscall_turns: one iteration starts syscallGoroutines goroutines that each
// make syscallsPerGo blocking 2 ms nanosleep calls (syscall.Nanosleep, which
// enters the syscall state as goro::Syscall does), and waits for them. Per
// run; all sleeping at once would take 20 ms. A nanosleep cut short by a
// signal sleeps the rest; any other failure is reported.
func benchSyscallTurns(b *testing.B) {
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < b.N; i++ {
		wg.Add(syscallGoroutines)
		for j := 0; j < syscallGoroutines; j++ {
			go func() {
				for r := 0; r < syscallsPerGo; r++ {
					ts := syscall.Timespec{Sec: 0, Nsec: syscallSleepNs}
					err := syscall.Nanosleep(&ts, &ts)
					for err == syscall.EINTR {
						err = syscall.Nanosleep(&ts, &ts)
					}
					if err != nil {
						failed.Add(1)
					}
				}
				wg.Done()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	if n := failed.Load(); n != 0 {
		fatalf("syscall_turns: %d nanosleep calls failed", n)
	}
}

// ---- RSS per parked goroutine ----

const pageKiB = 4

// statusKiB returns a "Vm...:  N kB" field of /proc/self/status.
func statusKiB(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fatalf("read /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line[len(field)+1:])
			if len(f) >= 1 {
				v, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return v
				}
			}
		}
	}
	fatalf("no %s in /proc/self/status", field)
	return 0
}

// rssKiB reads the resident set size from /proc/self/statm (second field, in
// pages).
func rssKiB() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		fatalf("read /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		fatalf("bad /proc/self/statm: %q", data)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		fatalf("bad /proc/self/statm: %q", data)
	}
	return pages * int64(os.Getpagesize()) / 1024
}

// waitCount polls until *c reaches want, or fails after the deadline.
func waitCount(c *atomic.Int64, want int64, what string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for c.Load() < want {
		if time.Now().After(deadline) {
			fatalf("rss: timed out after %v waiting for %s: %d of %d", limit, what, c.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func runRSS(procs, n int) {
	runtime.GC()
	before := rssKiB()
	pteBefore := statusKiB("VmPTE")
	ch := make(chan int) // never sent to; closed at the end
	var started, finished atomic.Int64
	t0 := time.Now()
	for i := 0; i < n; i++ {
		go func() {
			started.Add(1)
			<-ch
			finished.Add(1)
		}()
	}
	spawned := rssKiB()
	waitCount(&started, int64(n), "goroutines to start", 120*time.Second)
	// Each goroutine counts itself just before it blocks; give the last ones
	// time to reach the receive.
	time.Sleep(200 * time.Millisecond)
	parkedAt := time.Since(t0)
	parked := rssKiB()
	pteParked := statusKiB("VmPTE")
	close(ch)
	waitCount(&finished, int64(n), "goroutines to finish", 120*time.Second)
	after := rssKiB()
	perG := float64(parked-before) / float64(n)
	ptPerG := float64(pteParked-pteBefore) / float64(n)
	emit(result{
		Name: "rss_per_parked_goroutine", Procs: procs, Value: perG, Unit: "KiB/goroutine", Iters: n,
		Extra: fmt.Sprintf("rss_kib before=%d spawned=%d parked=%d released=%d; page_tables_kib before=%d parked=%d (%.2f KiB/goroutine, not in RSS); spawn+park %v",
			before, spawned, parked, after, pteBefore, pteParked,
			ptPerG, parkedAt.Round(time.Millisecond)),
	})
	// RSS does not count the page tables; this second figure does.
	emit(result{Name: "rss_plus_page_tables_per_parked_goroutine", Procs: procs, Value: perG + ptPerG,
		Unit: "KiB/goroutine", Iters: n})
}

func main() {
	testing.Init()
	procs := flag.Int("procs", 0, "GOMAXPROCS for this run (required)")
	benchtime := flag.String("benchtime", "300ms", "minimum time per benchmark")
	filter := flag.String("filter", ".", "regexp selecting workloads by name")
	all := flag.Bool("all", false, "run every workload at this procs count, not only the ones it is meant for")
	rss := flag.Bool("rss", false, "measure RSS per parked goroutine instead of the micro-benchmarks")
	n := flag.Int("n", 1000000, "goroutines to park for -rss")
	flag.Parse()
	if *procs <= 0 {
		fatalf("-procs=N is required (N >= 1)")
	}
	runtime.GOMAXPROCS(*procs)
	if *rss {
		runRSS(*procs, *n)
		return
	}
	if err := flag.Set("test.benchtime", *benchtime); err != nil {
		fatalf("bad -benchtime: %v", err)
	}
	re, err := regexp.Compile(*filter)
	if err != nil {
		fatalf("bad -filter: %v", err)
	}
	for _, w := range workloads {
		if !re.MatchString(w.name) || (!*all && !contains(w.procs, *procs)) {
			continue
		}
		opsPerIterOverride = 0
		// CPU time of each call of the benchmark function; testing.Benchmark
		// reports the last call, so keep the last. It includes the little
		// set-up each workload does outside its timed loop.
		var lastCPU time.Duration
		fn := w.fn
		r := testing.Benchmark(func(b *testing.B) {
			c0 := processCPU()
			fn(b)
			lastCPU = processCPU() - c0
		})
		if r.N == 0 {
			fatalf("%s: benchmark did not run", w.name)
		}
		ops := w.opsPerIter
		if opsPerIterOverride > 0 {
			ops = opsPerIterOverride
		}
		nsPerOp := float64(r.T.Nanoseconds()) / float64(r.N) / ops
		cpuPerOp := float64(lastCPU.Nanoseconds()) / float64(r.N) / ops * w.scale
		emit(result{Name: w.name, Procs: *procs, Value: nsPerOp * w.scale, Unit: w.unit, Iters: r.N,
			CPUValue: &cpuPerOp})
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
