// Command fair runs goro-fair's `spin` workload (stress/goro_fair.cc) on Go's
// own runtime, so that bench/fair_compare.sh can put Go's preemption and
// fairness beside goro's. Standard library only.
//
//	fair -procs=2 -goroutines=16 -seconds=3            16 call-free spinners on 2 Ps
//	fair -procs=1 -goroutines=1 -seconds=5             1 spinner beside the 1 ms sleeper
//	GODEBUG=asyncpreemptoff=1 fair -procs=1 -goroutines=4 -sleeper=false
//
// What it does, step by step as goro-fair does it:
//   - N goroutines each run spinLoop, a loop with no calls that increments its
//     own counter (check: go build -gcflags=-S . 2>&1 | grep -A30 'spinLoop STEXT'
//     shows no CALL between the loop's label and its back-edge);
//   - with -sleeper, one more goroutine sleeps -sleep_interval (1 ms) in a loop
//     and records how late each wake-up was (time.Since(before) - interval);
//   - a timekeeper waits until every goroutine has started (each adds one to
//     a shared count as it begins; with GODEBUG=asyncpreemptoff=1, where a
//     call-free spinner keeps its P and the goroutines behind it never start,
//     only until none has started for 100 ms; it gives up after 10 s), then
//     waits min(200 ms, seconds/10) of warm-up, snapshots every counter, waits
//     -seconds, snapshots again and stops the goroutines; shares, Jain's
//     index, min/max and throughput come from the deltas over that window,
//     lateness from the wake-ups inside it.
//
// The timekeeper is the one part that cannot be a goroutine. goro-fair's is a
// plain thread, outside the scheduler it measures, so the run ends even when
// spinners starve everything else (async preemption off on one P). Go has no
// thread outside its scheduler, so here the timekeeper is a child process
// (this program run with -timekeeper) that shares the counters and the stop
// flag through a MAP_SHARED mapping of a file in /dev/shm (tmpfs: no writeback
// faults). Its reads are as racy as goro-fair's, and as harmless (aligned
// 8-byte loads).
//
// Output: a short report, then one JSON line with goro-fair --json's keys
// (jain, min_max, throughput, p50_ms, p99_ms, max_ms, ...) and "impl":"go".
// A bad flag, goroutines still starting after 10 s, or a window with no
// iterations in it is one line on stderr and exit status 2, as in goro-fair.
// Go reports no preemption counts; count its SIGURGs from outside (perf stat
// -e signal:signal_deliver), as fair_compare.sh does.
//
// -signal_test measures the floor under any signal-driven preemption on this
// machine: what one signal costs the thread it interrupts, with no
// preemption at all. One spinner, locked to its thread and pinned to CPU 1,
// runs while another goroutine, pinned to CPU 0, sends that thread a SIGURG
// every -signal_interval (tgkill after a
// nanosleep; with -signal_interval=0 it only sleeps, so that the two runs
// differ only in the signals). Run it with GODEBUG=asyncpreemptoff=1: Go's
// handler then just returns, so the cost is the kernel's signal delivery and
// sigreturn (with the full XSAVE state in the signal frame) plus a trivial
// handler. The timekeeper also reads the spinner thread's CPU time
// (/proc/PPID/task/TID/schedstat) and the number of signals sent at both
// ends of the window, and the JSON line adds spin_cpu_s, signals and
// iter_per_cpu_s. Cost per signal = (1 - iter_per_cpu_s with signals /
// without) * spin_cpu_s / signals.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

var (
	procs      = flag.Int("procs", 2, "GOMAXPROCS (number of Ps)")
	goroutines = flag.Int("goroutines", 16, "number of call-free spinning goroutines")
	seconds    = flag.Float64("seconds", 3, "how long to measure")
	sleeper    = flag.Bool("sleeper", true, "run a goroutine that sleeps in a loop and measures its lateness")
	interval   = flag.Duration("sleep_interval", time.Millisecond, "the sleeper's sleep")
	tableRows  = flag.Int("table_rows", 32, "print at most this many goroutine rows")
	timekeeper = flag.Bool("timekeeper", false, "internal: run as the timekeeper child (shared mapping on fd 3)")
	signalTest = flag.Bool("signal_test", false, "measure the cost of a bare signal: 1 spinner on its own thread, "+
		"signalled every -signal_interval (run with GODEBUG=asyncpreemptoff=1)")
	signalIvl = flag.Duration("signal_interval", 200*time.Microsecond,
		"with -signal_test: how often to signal the spinner's thread; 0 = never (the baseline)")
)

// Layout of the shared mapping. Each hot word has a 128-byte pair of cache
// lines of its own (the L2 prefetcher fetches lines in pairs), as goro-fair's
// alignas(128) Worker records do.
const (
	lineSize     = 128
	offStop      = 0 * lineSize // uint32: set by the timekeeper at the end
	offMeasuring = 1 * lineSize // uint32: 1 inside the measured window
	offWindowNs  = 2 * lineSize // int64: the window's length, written before stop
	offSignals   = 3 * lineSize // uint64: signals sent so far (-signal_test)
	offSigInfo   = 4 * lineSize // int64 spinner tid, then signals and spinner CPU ns at both ends
	offStarted   = 5 * lineSize // uint64 words: goroutines started, how many will start, how many had (start*)
	offCounters  = 6 * lineSize // n counters, one line each, then c0[n] and c1[n]
)

// Words of the offStarted line: the goroutines add one to startCount as they
// begin; the parent writes startWant before the timekeeper starts; the
// timekeeper writes startSeen, the count when it stopped waiting.
const (
	startCount = iota
	startWant
	startSeen
)

// startLimit is how long the timekeeper waits for the goroutines to start.
const startLimit = 10 * time.Second

// startStall ends the wait with async preemption off when some goroutines
// have started and none has for this long: the rest are starved. (With it
// on, every goroutine gets a turn; a quiet spell means only that the OS ran
// something else.)
const startStall = 100 * time.Millisecond

// Words of the offSigInfo line.
const (
	infoTid = iota
	infoSig0
	infoSig1
	infoCPU0
	infoCPU1
)

func sharedSize(n int) int {
	size := offCounters + n*lineSize + 2*n*8
	page := os.Getpagesize()
	return (size + page - 1) / page * page
}

type shared struct{ mem []byte }

func (s shared) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s shared) i64(off int) *int64  { return (*int64)(unsafe.Pointer(&s.mem[off])) }
func (s shared) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }
func (s shared) stop() *uint32       { return s.u32(offStop) }
func (s shared) measuring() *uint32  { return s.u32(offMeasuring) }
func (s shared) counter(i int) *uint64 {
	return s.u64(offCounters + i*lineSize)
}
func (s shared) info(k int) *int64   { return s.i64(offSigInfo + 8*k) }
func (s shared) start(k int) *uint64 { return s.u64(offStarted + 8*k) }
func (s shared) c0(n, i int) *uint64 { return s.u64(offCounters + n*lineSize + i*8) }
func (s shared) c1(n, i int) *uint64 { return s.u64(offCounters + n*lineSize + n*8 + i*8) }

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fair: "+format+"\n", args...)
	os.Exit(2)
}

// spinLoop is the spin workload: a load of the stop flag (an intrinsic, no
// call), an increment, a plain store and a branch, the same as goro-fair's
// SpinLoop. It is a function of its own so that its assembly can be checked.
//
//go:noinline
func spinLoop(counter *uint64, stop *uint32) {
	n := *counter
	for atomic.LoadUint32(stop) == 0 {
		n++
		*counter = n
	}
}

func warmup(sec float64) time.Duration {
	w := time.Duration(sec / 10 * float64(time.Second))
	if w > 200*time.Millisecond {
		w = 200 * time.Millisecond
	}
	return w
}

// runTimekeeper is the child: goro-fair's timer thread.
func runTimekeeper(n int, sec float64) {
	f := os.NewFile(3, "shared")
	mem, err := syscall.Mmap(int(f.Fd()), 0, sharedSize(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fatalf("timekeeper: mmap: %v", err)
	}
	s := shared{mem}
	// The window must not open before the goroutines it measures run (the
	// parent spawns them after starting this process).
	want := atomic.LoadUint64(s.start(startWant))
	canStarve := !asyncPreemptionOn() // this process has the parent's GODEBUG
	begin, grew, seen := time.Now(), time.Now(), uint64(0)
	for {
		k := atomic.LoadUint64(s.start(startCount))
		now := time.Now()
		if k != seen {
			seen, grew = k, now
		}
		if k >= want || (canStarve && k > 0 && now.Sub(grew) >= startStall) {
			break
		}
		if now.Sub(begin) >= startLimit {
			atomic.StoreUint32(s.stop(), 1) // the parent's goroutines end; it reports this process's failure
			if k == 0 {
				fatalf("no goroutine had started after %v", startLimit)
			}
			fatalf("after %v only %d of %d goroutines had started, and more were still starting", startLimit, k, want)
		}
		time.Sleep(time.Millisecond)
	}
	atomic.StoreUint64(s.start(startSeen), seen)
	time.Sleep(warmup(sec))
	tid := atomic.LoadInt64(s.info(infoTid))
	schedstat := fmt.Sprintf("/proc/%d/task/%d/schedstat", os.Getppid(), tid)
	threadCPU := func() int64 { // ns the spinner's thread has run, or -1
		if tid == 0 {
			return -1
		}
		b, err := os.ReadFile(schedstat)
		if err != nil {
			return -1
		}
		v, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		if err != nil {
			return -1
		}
		return v
	}
	for i := 0; i < n; i++ {
		*s.c0(n, i) = atomic.LoadUint64(s.counter(i))
	}
	*s.info(infoCPU0) = threadCPU()
	*s.info(infoSig0) = int64(atomic.LoadUint64(s.u64(offSignals)))
	t0 := time.Now()
	atomic.StoreUint32(s.measuring(), 1)
	time.Sleep(time.Duration(sec * float64(time.Second)))
	for i := 0; i < n; i++ {
		*s.c1(n, i) = atomic.LoadUint64(s.counter(i))
	}
	*s.info(infoCPU1) = threadCPU()
	*s.info(infoSig1) = int64(atomic.LoadUint64(s.u64(offSignals)))
	atomic.StoreInt64(s.i64(offWindowNs), int64(time.Since(t0)))
	atomic.StoreUint32(s.measuring(), 0)
	atomic.StoreUint32(s.stop(), 1)
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	if i > len(sorted)-1 {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func asyncPreemptionOn() bool {
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(k) == "asyncpreemptoff" {
			if x, err := strconv.Atoi(v); err == nil && x != 0 {
				return false
			}
		}
	}
	return true
}

func main() {
	flag.Parse()
	if flag.NArg() > 0 {
		fatalf("unexpected argument %q (flags look like -procs=2)", flag.Arg(0))
	}
	n, sec := *goroutines, *seconds
	if n < 1 || n > 100000 {
		fatalf("-goroutines=%d: want 1 to 100000", n)
	}
	if !(sec > 0 && sec <= 3600) {
		fatalf("-seconds=%g: want more than 0, at most 3600", sec)
	}
	if *timekeeper {
		runTimekeeper(n, sec)
		return
	}
	if *procs < 1 || *procs > 1024 {
		fatalf("-procs=%d: want 1 to 1024", *procs)
	}
	if *interval < 10*time.Microsecond || *interval > time.Second {
		fatalf("-sleep_interval=%v: want 10us to 1s", *interval)
	}
	if *signalTest {
		if n != 1 || *sleeper || *procs < 2 {
			fatalf("-signal_test wants -goroutines=1 -sleeper=false and -procs >= 2 (the sender needs a P)")
		}
		if *signalIvl < 0 || *signalIvl > time.Second {
			fatalf("-signal_interval=%v: want 0 to 1s", *signalIvl)
		}
	}
	runtime.GOMAXPROCS(*procs)

	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "goro-fair-go-*")
	if err != nil {
		fatalf("shared file: %v", err)
	}
	os.Remove(f.Name())
	if err := f.Truncate(int64(sharedSize(n))); err != nil {
		fatalf("shared file: %v", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, sharedSize(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fatalf("mmap: %v", err)
	}
	s := shared{mem}
	for off := 0; off < len(mem); off += os.Getpagesize() {
		mem[off] = 0 // fault every page in before anything is timed
	}

	want := n
	if *signalTest {
		want++ // the sender
	}
	if *sleeper {
		want++
	}
	*s.start(startWant) = uint64(want)
	started := func() { atomic.AddUint64(s.start(startCount), 1) }

	child := exec.Command(os.Args[0], "-timekeeper", "-goroutines="+strconv.Itoa(n),
		"-seconds="+strconv.FormatFloat(sec, 'g', -1, 64))
	child.ExtraFiles = []*os.File{f}
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	child.Env = append(os.Environ(), "GOMAXPROCS=1")
	if err := child.Start(); err != nil {
		fatalf("starting the timekeeper: %v", err)
	}

	expected := int(sec*float64(time.Second)/float64(*interval)) + 64
	lateness := make([]float64, 0, expected*2) // preallocated: no GC while measuring
	var wg sync.WaitGroup
	wg.Add(n)
	tidReady := make(chan int, 1)
	for i := 0; i < n; i++ {
		go func(i int) {
			if *signalTest {
				runtime.LockOSThread()
				pinThread(1)
				tid := syscall.Gettid()
				atomic.StoreInt64(s.info(infoTid), int64(tid))
				tidReady <- tid
			}
			started()
			spinLoop(s.counter(i), s.stop())
			wg.Done()
		}(i)
	}
	if *signalTest {
		wg.Add(1)
		go func() {
			runtime.LockOSThread()
			pinThread(0)
			syscall.RawSyscall(syscall.SYS_PRCTL, 29 /* PR_SET_TIMERSLACK */, 1, 0) // nanosleep to the µs
			started()
			tid := <-tidReady
			pid := syscall.Getpid()
			ivl := *signalIvl
			ts := syscall.NsecToTimespec(int64(ivl))
			if ivl == 0 {
				ts = syscall.NsecToTimespec(int64(200 * time.Microsecond))
			}
			var sent uint64
			for atomic.LoadUint32(s.stop()) == 0 {
				syscall.Nanosleep(&ts, nil)
				if ivl > 0 {
					syscall.Tgkill(pid, tid, syscall.SIGURG)
					sent++
					atomic.StoreUint64(s.u64(offSignals), sent)
				}
			}
			wg.Done()
		}()
	}
	if *sleeper {
		wg.Add(1)
		go func() {
			started()
			iv := *interval
			for atomic.LoadUint32(s.stop()) == 0 {
				t := time.Now()
				time.Sleep(iv)
				late := time.Since(t) - iv
				if atomic.LoadUint32(s.measuring()) != 0 {
					lateness = append(lateness, float64(late)/float64(time.Millisecond))
				}
			}
			wg.Done()
		}()
	}
	wg.Wait()
	if err := child.Wait(); err != nil {
		fatalf("the timekeeper failed (%v); nothing was measured", err)
	}
	window := time.Duration(atomic.LoadInt64(s.i64(offWindowNs)))
	if window <= 0 {
		fatalf("the timekeeper wrote no window")
	}

	deltas := make([]float64, n)
	var total, sumsq float64
	mn, mx := math.Inf(1), 0.0
	for i := 0; i < n; i++ {
		d := float64(*s.c1(n, i) - *s.c0(n, i))
		deltas[i] = d
		total += d
		sumsq += d * d
		mn = math.Min(mn, d)
		mx = math.Max(mx, d)
	}
	jain, ratio := 0.0, 0.0
	if sumsq > 0 {
		jain = total * total / (float64(n) * sumsq)
	}
	if mx > 0 {
		ratio = mn / mx
	}
	sort.Float64s(lateness)
	p50, p99 := percentile(lateness, 0.50), percentile(lateness, 0.99)
	lmax := 0.0
	if len(lateness) > 0 {
		lmax = lateness[len(lateness)-1]
	}
	if total == 0 {
		// Jain's index 0 would read as "one goroutine got everything".
		fatalf("no work was measured in the window: the %d goroutines made no iteration in %.3f s (a longer -seconds?)",
			n, window.Seconds())
	}
	throughput := total / window.Seconds()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := func(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }
	async := asyncPreemptionOn()

	fmt.Printf("fair (Go %s): workload=spin procs=%d goroutines=%d seconds=%g time_slice=10ms (fixed) async_preemption=%v\n",
		runtime.Version(), *procs, n, sec, map[bool]string{true: "on", false: "off"}[async])
	if seen := *s.start(startSeen); seen < uint64(want) {
		fmt.Printf("  (%d of %d goroutines had not started when the warm-up began: with async preemption off, none had for a while, so the rest were starved)\n",
			uint64(want)-seen, want)
	}
	fmt.Println()
	fmt.Printf("  %9s  %15s  %7s\n", "goroutine", "iterations", "share")
	rows := n
	if *tableRows < rows {
		rows = max(0, *tableRows)
	}
	for i := 0; i < rows; i++ {
		share := 0.0
		if total > 0 {
			share = deltas[i] / total * 100
		}
		fmt.Printf("  %9d  %15.0f  %6.2f%%\n", i, deltas[i], share)
	}
	if rows < n {
		fmt.Printf("  ... %d more goroutines (-table_rows)\n", n-rows)
	}
	pct := func(x float64) float64 {
		if total > 0 {
			return x / total * 100
		}
		return 0
	}
	fmt.Printf("\nFairness over %d CPU-bound goroutines (fair share %.2f%%):\n", n, 100/float64(n))
	fmt.Printf("  Jain's index      %.5f\n", jain)
	fmt.Printf("  min/max share     %.3f     (min %.2f%%, max %.2f%%)\n", ratio, pct(mn), pct(mx))
	fmt.Printf("  throughput        %.4g iterations/s over %.3f s\n", throughput, window.Seconds())
	if *sleeper {
		fmt.Printf("Sleeper (sleeps %v, %d wake-ups): lateness p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
			*interval, len(lateness), p50, p99, lmax)
	}
	fmt.Printf("Process CPU: user %.3f s, system %.3f s\n", cpu(ru.Utime), cpu(ru.Stime))

	summary := map[string]any{
		"impl": "go", "go": runtime.Version(), "workload": "spin", "procs": *procs, "goroutines": n,
		"time_slice_us": 10000, "async": async,
		"jain": round(jain, 6), "min_max": round(ratio, 6), "throughput": round(throughput, 0),
		"p50_ms": round(p50, 4), "p99_ms": round(p99, 4), "max_ms": round(lmax, 4),
		"window_s": round(window.Seconds(), 6), "wakeups": len(lateness),
		"user_s": cpu(ru.Utime), "sys_s": cpu(ru.Stime),
	}
	if *signalTest {
		spinCPU := float64(*s.info(infoCPU1)-*s.info(infoCPU0)) / 1e9
		signals := *s.info(infoSig1) - *s.info(infoSig0)
		summary["workload"] = "signal_test"
		summary["signal_interval_us"] = signalIvl.Microseconds()
		summary["signals"] = signals
		if *s.info(infoCPU0) >= 0 && *s.info(infoCPU1) >= 0 && spinCPU > 0 {
			summary["spin_cpu_s"] = round(spinCPU, 6)
			summary["iter_per_cpu_s"] = round(total/spinCPU, 0)
			fmt.Printf("Signal test: %d signals to the spinner's thread in the window; it ran %.3f s and did %.4g iterations per CPU-second\n",
				signals, spinCPU, total/spinCPU)
		} else {
			fmt.Printf("Signal test: could not read the spinner thread's CPU time\n")
		}
	}
	out, _ := json.Marshal(summary)
	fmt.Println(string(out))
}

// pinThread keeps the calling thread on CPU cpu (-signal_test only, so that
// the sender's wake-ups do not land on the spinner's CPU). Best effort.
func pinThread(cpu int) {
	if runtime.NumCPU() < 2 {
		return
	}
	var mask [16]uint64
	mask[cpu/64] |= 1 << (cpu % 64)
	syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, uintptr(len(mask)*8), uintptr(unsafe.Pointer(&mask[0])))
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}
