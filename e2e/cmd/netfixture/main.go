// Command netfixture is the datapath suite's one fixture binary
// (e2e/datapath_test.go, make e2e-cilium), packed into one image:
//
//	netfixture dns NAME=ADDR...   answer A queries for exactly these names on UDP port 53
//	netfixture echo NAME          accept TCP on port 80, write NAME and a newline, close
//	netfixture probe TARGET...    from a sandbox pod: resolve and connect, one JSON line per target
//	netfixture idle               a sandbox pod's process: wait for SIGTERM
//
// It answers and serves only what the test gives it: the dns mode knows no
// name it was not told, and forwards nothing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: netfixture dns NAME=ADDR... | echo NAME | probe TARGET... | idle")
		os.Exit(2)
	}
	var err error
	switch mode, args := os.Args[1], os.Args[2:]; mode {
	case "dns":
		err = serveDNS(args)
	case "echo":
		err = serveEcho(args)
	case "probe":
		err = probe(args)
	case "idle":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		<-ctx.Done()
		stop()
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netfixture:", err)
		os.Exit(1)
	}
}

// serveDNS answers A queries for the names given as NAME=ADDR; any other
// name gets NXDOMAIN, any other type an empty answer.
func serveDNS(args []string) error {
	records := map[string]netip.Addr{}
	for _, a := range args {
		name, addr, ok := strings.Cut(a, "=")
		ip, err := netip.ParseAddr(addr)
		if !ok || err != nil || !ip.Is4() {
			return fmt.Errorf("record %q: want NAME=IPv4", a)
		}
		records[strings.ToLower(strings.TrimSuffix(name, "."))+"."] = ip
	}
	conn, err := net.ListenPacket("udp", ":53")
	if err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return err
		}
		if reply, err := answer(buf[:n], records); err == nil {
			_, _ = conn.WriteTo(reply, from)
		}
	}
}

func answer(query []byte, records map[string]netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	ip, known := records[strings.ToLower(q.Name.String())]
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if known && q.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 30}
		if err := b.AResource(rh, dnsmessage.AResource{A: ip.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

func serveEcho(args []string) error {
	if len(args) != 1 {
		return errors.New("echo: want one NAME")
	}
	ln, err := net.Listen("tcp", ":80")
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, args[0]+"\n")
		}()
	}
}

// Result is what probe prints for one target, one JSON line each.
type Result struct {
	Target string `json:"target"`
	// Resolved are the addresses DNS gave for a name (empty for an address).
	Resolved []string `json:"resolved,omitempty"`
	DNSError string   `json:"dnsError,omitempty"`
	// Reply is what the echo server at the first address wrote; empty when
	// the connection failed (Error says how).
	Reply string `json:"reply,omitempty"`
	Error string `json:"error,omitempty"`
}

// probe resolves each TARGET (HOST:PORT; a name through the pod's resolver,
// which asks kube-dns) and connects to its first address with a 2-second
// timeout, once: the caller retries.
func probe(targets []string) error {
	enc := json.NewEncoder(os.Stdout)
	for _, t := range targets {
		host, port, err := net.SplitHostPort(t)
		if err != nil {
			return err
		}
		r := Result{Target: t}
		addr := host
		if _, err := netip.ParseAddr(host); err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			ips, err := net.DefaultResolver.LookupHost(ctx, host)
			cancel()
			r.Resolved = ips
			if err != nil {
				r.DNSError = err.Error()
			}
			addr = ""
			if len(ips) > 0 {
				addr = ips[0]
			}
		}
		if addr != "" {
			r.Reply, err = dial(net.JoinHostPort(addr, port))
			if err != nil {
				r.Error = err.Error()
			}
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func dial(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(io.LimitReader(c, 256))
	if len(b) == 0 && err == nil {
		err = errors.New("connected, but nothing was written back")
	}
	return strings.TrimSpace(string(b)), err
}
