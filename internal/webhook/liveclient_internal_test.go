package webhook

import (
	"testing"
	"time"
)

// Hung requests time out together; only the first of their drops closes
// connections, and a later hang drops again.
func TestConnectionDropsComeAtMostOncePerInterval(t *testing.T) {
	closes := 0
	drop := dropAtMostEvery(50*time.Millisecond, func() { closes++ })
	for range 5 {
		drop()
	}
	if closes != 1 {
		t.Fatalf("5 drops at once closed %d times, want 1", closes)
	}
	time.Sleep(60 * time.Millisecond)
	drop()
	if closes != 2 {
		t.Fatalf("a drop after the interval closed %d times in all, want 2", closes)
	}
}
