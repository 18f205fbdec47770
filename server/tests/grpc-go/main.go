// dp-grpc-go: a proxyless gRPC client (grpc-go with its xds package) for
// deltapilot's end-to-end tests. It resolves an `xds:///` target through the
// bootstrap named by GRPC_XDS_BOOTSTRAP, makes -n unary calls to
// /demo.Greeter/Hello with raw bytes, and prints one line per call: the reply
// text, or `error: <code>: <message>`. The test tallies the lines, so a rule
// (a weighted split, a header match, a fault abort) shows in them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver and balancers
)

// rawCodec passes request and reply bytes through untouched: the test backend
// is a generic handler that answers raw bytes, so no generated stubs are needed.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

type headers []string

func (h *headers) String() string     { return strings.Join(*h, ",") }
func (h *headers) Set(s string) error { *h = append(*h, s); return nil }

func main() {
	target := flag.String("target", "", "xds:/// target, e.g. xds:///greeter.test.local:8080")
	n := flag.Int("n", 1, "number of calls (at most 10000)")
	callTimeout := flag.Duration("call-timeout", 20*time.Second, "deadline of each call")
	var md headers
	flag.Var(&md, "header", "request metadata key=value (repeatable)")
	flag.Parse()
	if *target == "" || *n < 1 || *n > 10000 {
		fmt.Fprintln(os.Stderr, "usage: dp-grpc-go -target xds:///host:port [-n 1..10000] [-header k=v]...")
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fmt.Fprintf(os.Stderr, "dp-grpc-go: %s: %v\n", *target, err)
		os.Exit(1)
	}
	defer conn.Close()
	pairs := []string{}
	for _, kv := range md {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "dp-grpc-go: -header %q is not key=value\n", kv)
			os.Exit(2)
		}
		pairs = append(pairs, k, v)
	}
	failed := 0
	for i := 0; i < *n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), *callTimeout)
		ctx = metadata.AppendToOutgoingContext(ctx, pairs...)
		req := []byte("hi")
		var reply []byte
		err := conn.Invoke(ctx, "/demo.Greeter/Hello", &req, &reply, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			failed++
			st := status.Convert(err)
			fmt.Printf("error: %s: %s\n", st.Code(), st.Message())
			continue
		}
		fmt.Println(string(reply))
	}
	if failed == *n {
		os.Exit(1)
	}
}
