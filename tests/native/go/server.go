// server.go: a cgo Go server for the native sampler (tests/native/check_go.py).
//
// An HTTP server on 127.0.0.1 (its port printed), a goroutine that spins in
// main.spin, the Go runtime's own threads. It runs until the agent (text
// exporter) wrote ROUNDS rounds, then exits through C's exit(), which runs
// the agent's destructor (Go's own exit does not).
//
// usage: server ROUNDS
package main

/*
#include <stdlib.h>
static void leave(void) { exit(0); }
*/
import "C"

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

var sink uint64

//go:noinline
func spin() {
	for {
		for i := 0; i < 1000000; i++ {
			sink += uint64(i)
		}
	}
}

func roundsWritten() int {
	dir := os.Getenv("STACKSHOT_OUTPUT_DIR")
	files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("*.%d.txt", os.Getpid())))
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			n += strings.Count(string(b), "Full thread dump")
		}
	}
	return n
}

func main() {
	rounds, _ := strconv.Atoi(os.Args[1])
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %d\n", sink)
	})
	go http.Serve(ln, nil)
	go spin()
	fmt.Printf("server: port %d pid %d\n", ln.Addr().(*net.TCPAddr).Port, os.Getpid())
	os.Stdout.Sync()
	for i := 0; i < 600 && roundsWritten() < rounds; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("server: done")
	os.Stdout.Sync()
	C.leave()
}
