package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestResponsesCloseTheirConnectionOnceDraining(t *testing.T) {
	sig := make(chan os.Signal, 2)
	ctx, draining := shutdownContext(sig, time.Hour)
	srv := httptest.NewServer(closeWhenDraining(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), draining))
	defer srv.Close()
	get := func() *http.Response {
		t.Helper()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.Close || resp.Header.Get("Connection") == "close" {
		t.Fatalf("before the signal the connection is closed after a response (Close=%v, Connection=%q): want keep-alive", resp.Close, resp.Header.Get("Connection"))
	}
	sig <- syscall.SIGTERM
	deadline := time.Now().Add(5 * time.Second)
	for !draining.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if resp := get(); !resp.Close {
		t.Fatal("after SIGTERM a response keeps its connection open: want Connection: close while draining")
	}
	if ctx.Err() != nil {
		t.Fatal("the context ended before the drain did: the server would stop serving while the apiserver still sends to it")
	}
	// A second signal ends the drain at once.
	sig <- syscall.SIGTERM
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a second signal did not end the drain")
	}
}

func TestTheDrainEndsAfterItsDuration(t *testing.T) {
	sig := make(chan os.Signal, 1)
	ctx, _ := shutdownContext(sig, 10*time.Millisecond)
	sig <- syscall.SIGINT
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context was not cancelled after the drain")
	}
}
