// Command bareserver is the baseline of intake's load measurement: a bare
// net/http server that reads any request body and answers 202 with a body
// shaped like intake's, doing nothing else. Run it next to tally intake and
// point the same load tool at both.
//
//	go -C bench run ./bareserver -listen 127.0.0.1:8091
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8091", "TCP address to serve on")
	flag.Parse()
	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 4<<10))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"event_id":"e","status":"pending","status_url":"/v1/votes/e"}`+"\n")
		}),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
