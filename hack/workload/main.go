// Command workload is the departure benchmark's service (bench/departure.py): a small HTTP
// server that behaves as production services do when their pod is stopped.
//
//   - GET /         answers at once (the steady traffic);
//   - GET /slow?s=N answers after N seconds (the long query);
//   - GET /healthz  200 while serving, 503 once draining (the readiness probe);
//   - GET /prestop?s=N marks the server draining and returns after N seconds: the pod's
//     preStop hook, so the endpoint leaves every proxy before SIGTERM closes the listener.
//     While draining, responses carry "Connection: close", moving keep-alive clients to
//     another endpoint.
//   - SIGTERM: http.Server.Shutdown, which stops accepting and waits for every request in
//     flight (the slow ones too) before the process exits.
//
// Run as PID 1, a process gets no default action for SIGTERM: without the handler below the
// kubelet's SIGTERM would be ignored and only the SIGKILL at the end of the grace ends it.
//
// The same binary is the probe and the hook (the image holds nothing else):
//
//	workload -get /healthz        exit 0 on a 200 from 127.0.0.1
//	workload -get '/prestop?s=5'
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	listen = flag.String("listen", ":8080", "address to serve on")
	get    = flag.String("get", "", "client mode: GET this path from the local server and exit")
)

type server struct {
	draining atomic.Bool
	inflight atomic.Int64
	name     string
}

func (s *server) wrap(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h(w, r)
	}
}

func seconds(r *http.Request, def float64) time.Duration {
	v, err := strconv.ParseFloat(r.URL.Query().Get("s"), 64)
	if err != nil {
		v = def
	}
	return time.Duration(v * float64(time.Second))
}

func (s *server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.wrap(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok %s\n", s.name)
	}))
	mux.HandleFunc("/slow", s.wrap(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		time.Sleep(seconds(r, 20))
		fmt.Fprintf(w, "slow %s %.1fs\n", s.name, time.Since(start).Seconds())
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/prestop", func(w http.ResponseWriter, r *http.Request) {
		s.draining.Store(true)
		d := seconds(r, 5)
		log.Printf("preStop: draining, serving %v more", d)
		time.Sleep(d)
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func probe(path string) int {
	_, port, err := net.SplitHostPort(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c := http.Client{Timeout: 60 * time.Second}
	resp, err := c.Get("http://127.0.0.1:" + port + path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, resp.Status)
		return 1
	}
	return 0
}

func main() {
	flag.Parse()
	if *get != "" {
		os.Exit(probe(*get))
	}
	name, _ := os.Hostname()
	s := &server{name: name}
	srv := &http.Server{Addr: *listen, Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		sig := <-sigs
		s.draining.Store(true)
		log.Printf("%v: shutting down, %d requests in flight", sig, s.inflight.Load())
		// The pod's grace period bounds this; the kubelet's SIGKILL ends what is left.
		if err := srv.Shutdown(context.Background()); err != nil {
			log.Printf("shutdown: %v", err)
		}
		log.Printf("all requests finished")
		close(done)
	}()
	log.Printf("serving on %s", *listen)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-done
}
