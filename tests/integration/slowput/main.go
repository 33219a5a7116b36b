// slowput answers etcd's KV.Put after a fixed delay, over gRPC's wire format
// (HTTP/2 without TLS), with the Go standard library only. The load
// generator's latency tests use it: its own overhead is a fraction of a
// millisecond, where a Python gRPC server adds one or two.
//
//	slowput -delay 5ms [-serial]
//
// prints its port on the first line. With -serial it answers one request at a
// time: its capacity is exactly one per delay.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

func main() {
	delay := flag.Duration("delay", 5*time.Millisecond, "time before each answer")
	serial := flag.Bool("serial", false, "answer one request at a time")
	flag.Parse()

	var mu sync.Mutex
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/etcdserverpb.KV/Put" {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Trailer", "Grpc-Status")
			w.WriteHeader(http.StatusOK)
			w.Header().Set("Grpc-Status", "12") // UNIMPLEMENTED
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if *serial {
			mu.Lock()
			time.Sleep(*delay)
			mu.Unlock()
		} else {
			time.Sleep(*delay)
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte{0, 0, 0, 0, 0}) // an empty PutResponse, uncompressed
		w.Header().Set("Grpc-Status", "0")
	})

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	server := &http.Server{Handler: handler, Protocols: new(http.Protocols)}
	server.Protocols.SetUnencryptedHTTP2(true)
	fmt.Println(listener.Addr().(*net.TCPAddr).Port)
	panic(server.Serve(listener))
}
