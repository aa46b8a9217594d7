// loadgen replays a fixed list of ranged GETs ("path first last" per line) with N concurrent
// workers and prints JSON: requests, bytes, wall seconds, MiB/s, p50/p99 latency in ms.
// Written for the benchmark because wrk cannot stop at the end of a list and a Python client
// is the bottleneck on a 2-core machine shared with the servers.
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
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: loadgen BASE_URL LIST_FILE WORKERS")
		os.Exit(2)
	}
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
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true}}
	lat := make([]float64, len(reqs))
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
			for i := range next {
				r := reqs[i]
				t0 := time.Now()
				hr, _ := http.NewRequest("GET", base+r.path, nil)
				hr.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", r.first, r.last))
				resp, err := client.Do(hr)
				var n int64
				if err == nil {
					n, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				lat[i] = float64(time.Since(t0).Microseconds()) / 1000
				mu.Lock()
				if err != nil || resp.StatusCode != 206 || n != r.last-r.first+1 {
					failed = append(failed, fmt.Sprintf("%s: err=%v n=%d", r.path, err, n))
				}
				total += n
				mu.Unlock()
			}
		}()
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	wall := time.Since(start).Seconds()
	sort.Float64s(lat)
	pct := func(p float64) float64 { return lat[int(p*float64(len(lat)-1))] }
	out := map[string]any{"requests": len(reqs), "bytes": total, "wall_s": wall,
		"mib_s": float64(total) / (1 << 20) / wall, "p50_ms": pct(0.50), "p99_ms": pct(0.99), "failed": failed}
	json.NewEncoder(os.Stdout).Encode(out)
	if len(failed) > 0 {
		os.Exit(1)
	}
}
