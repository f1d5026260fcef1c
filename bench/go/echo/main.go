// Command echo is examples/echo_server.cc written in Go, for
// bench/echo_compare.sh: a TCP echo server on 127.0.0.1, one goroutine per
// connection, each reading into a 4 KiB buffer and writing back what it read.
// Standard library only.
//
//	echo -port=7777             until killed
//	echo -port=0                an ephemeral port
//	echo -port=0 -seconds=30    stop accepting after 30 s, then exit
//
// It prints "listening on 127.0.0.1:PORT" once the socket listens. Like the
// goro server it uses an explicit read/write loop, not io.Copy (which on
// Linux may splice between the sockets, a different workload). Go's net
// package sets TCP_NODELAY on accepted connections; the goro server sets it
// too.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

func serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF included
			return
		}
	}
}

func main() {
	port := flag.Int("port", 7777, "TCP port on 127.0.0.1; 0 picks a free one and prints it")
	seconds := flag.Float64("seconds", 0, "stop after this many seconds; 0 runs until killed")
	flag.Parse()

	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "echo: cannot listen on 127.0.0.1:%d: %v\n", *port, err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", ln.Addr())

	var connections int64
	if *seconds > 0 {
		time.AfterFunc(time.Duration(*seconds*float64(time.Second)), func() {
			fmt.Printf("echo: %d connections served, stopping\n", atomic.LoadInt64(&connections))
			os.Exit(0)
		})
	}
	for {
		c, err := ln.Accept()
		if err != nil { // e.g. out of file descriptors: say so, keep serving
			fmt.Fprintf(os.Stderr, "echo: accept: %v\n", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		atomic.AddInt64(&connections, 1)
		go serve(c)
	}
}
