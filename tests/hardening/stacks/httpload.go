// httpload.go: a cgo Go HTTP server and its load generator, one binary
// (tests/hardening/stacks/check_go_http.py).
//
// The agent's signal is delivered to whichever thread runs Go code, most
// of the time on a goroutine's stack: a few KiB that the Go runtime sizes
// itself, moves and grows (copystack) and never expects anything below its
// stack pointer. A signal frame pushed there lands on the next goroutine's
// stack or on heap memory, and the runtime dies later walking a frame it
// does not know ("fatal error: unknown caller pc"). So the handlers grow
// their goroutines' stacks (recursion with locals), allocate (with GOGC=5
// the collector scans those stacks all the time) and call into C (cgo
// switches to the thread's own stack).
//
// usage: httpload server
//          listens on 127.0.0.1, prints "server: port N pid P"; /work?n=I
//          answers "ok I <sum>", /quit answers and leaves through C's
//          exit() (which runs the agent's destructor; Go's own exit does
//          not), printing "server: served N requests"
//        httpload client PORT REQUESTS WORKERS
//          REQUESTS keep-alive requests over WORKERS connections, each
//          answer checked; then /quit. Exit 0 when every answer was right,
//          1 at the first wrong or failed one.
package main

/*
#include <stdint.h>
#include <stdlib.h>

// a little work on the thread's own stack, from Go through cgo
static uint32_t mix(const unsigned char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}
static void leave(int code) { exit(code); }
*/
import "C"

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// body is what the server answers for request i; the client computes the
// same in Go (fnv1a) to check it.
func payload(i int) []byte {
	b := make([]byte, 512+i%1536)
	for j := range b {
		b[j] = byte(i*7 + j*13)
	}
	return b
}

func fnv1a(p []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range p {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

// deep recurses with a frame of a few hundred bytes: the goroutine's
// stack grows (and is copied) while the handler runs.
//
//go:noinline
func deep(n int, acc uint32) uint32 {
	var pad [256]byte
	pad[n%256] = byte(acc)
	if n == 0 {
		return acc + uint32(pad[0])
	}
	return deep(n-1, acc*31+uint32(pad[n%256])) ^ uint32(pad[(n*7)%256])
}

func server() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
	var served int64
	var keep sync.Map // garbage that lives a while, for the collector
	http.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil {
			http.Error(w, "bad n", 400)
			return
		}
		b := payload(i)
		sum := uint32(C.mix((*C.uchar)(unsafe.Pointer(&b[0])), C.size_t(len(b))))
		parts := make([]string, 0, 8)
		for k := 0; k < 8; k++ {
			parts = append(parts, strconv.Itoa(i*k))
		}
		keep.Store(i%64, strings.Join(parts, ","))
		d := deep(8+i%120, uint32(i))
		atomic.AddInt64(&served, 1)
		fmt.Fprintf(w, "ok %d %d %d\n", i, sum, d)
	})
	http.HandleFunc("/quit", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "bye\n")
		go func() {
			time.Sleep(100 * time.Millisecond)
			fmt.Printf("server: served %d requests\n", atomic.LoadInt64(&served))
			os.Stdout.Sync()
			C.leave(0)
		}()
	})
	fmt.Printf("server: port %d pid %d\n", ln.Addr().(*net.TCPAddr).Port, os.Getpid())
	os.Stdout.Sync()
	fmt.Fprintln(os.Stderr, "server:", http.Serve(ln, nil))
	os.Exit(1)
}

func client(port string, total, workers int) {
	tr := &http.Transport{MaxIdleConns: workers, MaxIdleConnsPerHost: workers,
		MaxConnsPerHost: workers, DisableCompression: true}
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	base := "http://127.0.0.1:" + port
	var next, done int64
	var failed atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for failed.Load() == nil {
				i := int(atomic.AddInt64(&next, 1)) - 1
				if i >= total {
					return
				}
				if err := request(cl, base, i); err != nil {
					failed.Store(fmt.Sprintf("request %d: %v", i, err))
					return
				}
				atomic.AddInt64(&done, 1)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if f := failed.Load(); f != nil {
		fmt.Printf("client: FAILED after %d answers in %.1f s: %s\n", done, secs, f)
		os.Exit(1)
	}
	fmt.Printf("client: %d requests ok in %.1f s (%d workers)\n", done, secs, workers)
	if r, err := cl.Get(base + "/quit"); err == nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}

func request(cl *http.Client, base string, i int) error {
	r, err := cl.Get(base + "/work?n=" + strconv.Itoa(i))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return err
	}
	var n int
	var sum, d uint32
	if _, err := fmt.Sscanf(string(body), "ok %d %d %d", &n, &sum, &d); err != nil ||
		n != i || sum != fnv1a(payload(i)) || d != deep(8+i%120, uint32(i)) {
		return fmt.Errorf("status %d, wrong answer %q", r.StatusCode, body)
	}
	return nil
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "server" {
		server()
	} else if len(os.Args) == 5 && os.Args[1] == "client" {
		total, _ := strconv.Atoi(os.Args[3])
		workers, _ := strconv.Atoi(os.Args[4])
		client(os.Args[2], total, workers)
	} else {
		fmt.Fprintln(os.Stderr, "usage: httpload server | client PORT REQUESTS WORKERS")
		os.Exit(2)
	}
}
