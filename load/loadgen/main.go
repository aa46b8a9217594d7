// loadgen replays a fixed list of ranged GETs ("path first last" per line) with N concurrent
// workers and prints JSON: requests, bytes, wall seconds, MiB/s, p50/p99 latency in ms.
// With SECONDS it stops issuing after that long (a cold row: at most the list once); with
// "cycle" too it goes round the list until then (a warm row of at least SECONDS).
// Written for the benchmark because wrk cannot stop at the end of a list and a Python client
// is the bottleneck on a 2-core machine shared with the servers.
//
// LOADGEN_READ_BYTES=N (optional) reads each body through a buffer of N bytes (and sets the
// connection's read buffer to N). Without it a body is read as io.Discard reads it, 8 KiB per
// read call. Only the client's own CPU per byte changes; what the server does is the same.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type req struct {
	path        string
	first, last int64
}

func main() {
	if len(os.Args) < 4 || len(os.Args) > 6 {
		fmt.Fprintln(os.Stderr, "usage: loadgen BASE_URL LIST_FILE WORKERS [SECONDS [cycle]]")
		os.Exit(2)
	}
	limit := time.Duration(0)
	if len(os.Args) >= 5 {
		secs, err := strconv.ParseFloat(os.Args[4], 64)
		if err != nil || secs <= 0 {
			fmt.Fprintln(os.Stderr, "SECONDS must be a positive number")
			os.Exit(2)
		}
		limit = time.Duration(secs * float64(time.Second))
	}
	cycle := len(os.Args) == 6 && os.Args[5] == "cycle"
	base, listPath := os.Args[1], os.Args[2]
	workers, err := strconv.Atoi(os.Args[3])
	if err != nil || workers < 1 {
		fmt.Fprintln(os.Stderr, "WORKERS must be a positive integer")
		os.Exit(2)
	}
	f, err := os.Open(listPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var reqs []req
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) != 3 {
			continue
		}
		a, _ := strconv.ParseInt(parts[1], 10, 64)
		b, _ := strconv.ParseInt(parts[2], 10, 64)
		reqs = append(reqs, req{parts[0], a, b})
	}
	readBytes := 0
	if v := os.Getenv("LOADGEN_READ_BYTES"); v != "" {
		if readBytes, err = strconv.Atoi(v); err != nil || readBytes < 4096 {
			fmt.Fprintln(os.Stderr, "LOADGEN_READ_BYTES must be an integer of at least 4096")
			os.Exit(2)
		}
	}
	transport := &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true}
	if readBytes > 0 {
		transport.ReadBufferSize = readBytes
	}
	client := &http.Client{Transport: transport}
	if len(reqs) == 0 {
		fmt.Fprintln(os.Stderr, "the list is empty")
		os.Exit(2)
	}
	var lat []float64
	var total int64
	var mu sync.Mutex
	var failed []string
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			if readBytes > 0 {
				buf = make([]byte, readBytes)
			}
			for i := range next {
				r := reqs[i]
				t0 := time.Now()
				hr, _ := http.NewRequest("GET", base+r.path, nil)
				hr.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", r.first, r.last))
				resp, err := client.Do(hr)
				var n int64
				if err == nil {
					n, err = drain(resp.Body, buf)
					resp.Body.Close()
				}
				ms := float64(time.Since(t0).Microseconds()) / 1000
				mu.Lock()
				lat = append(lat, ms)
				if err != nil || resp.StatusCode != 206 || n != r.last-r.first+1 {
					failed = append(failed, fmt.Sprintf("%s: err=%v n=%d", r.path, err, n))
				}
				total += n
				mu.Unlock()
			}
		}()
	}
	for i := 0; ; i++ {
		if i == len(reqs) {
			if !cycle {
				break
			}
			i = 0
		}
		if limit > 0 && time.Since(start) >= limit {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	wall := time.Since(start).Seconds()
	sort.Float64s(lat)
	pct := func(p float64) float64 { return lat[int(p*float64(len(lat)-1))] }
	out := map[string]any{"requests": len(lat), "bytes": total, "wall_s": wall,
		"mib_s": float64(total) / (1 << 20) / wall, "p50_ms": pct(0.50), "p99_ms": pct(0.99), "failed": failed}
	json.NewEncoder(os.Stdout).Encode(out)
	if len(failed) > 0 {
		os.Exit(1)
	}
}

// discard is io.Discard without its ReadFrom, so io.CopyBuffer reads through the given buffer.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// drain reads a body to its end: through buf when there is one, else as io.Discard does.
func drain(body io.Reader, buf []byte) (int64, error) {
	if buf == nil {
		return io.Copy(io.Discard, body)
	}
	return io.CopyBuffer(discard{}, body, buf)
}
