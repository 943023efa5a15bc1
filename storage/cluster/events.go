package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
)

// event is one thing the master did or learned, for its status page.
type event struct {
	Time                         time.Time
	Kind, Tablet, Server, Detail string
}

// eventRing keeps the newest events.
type eventRing struct {
	mu  sync.Mutex
	buf []event
	max int
}

func newEventRing(max int) *eventRing { return &eventRing{max: max} }

func (r *eventRing) add(e event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, e)
	if len(r.buf) > r.max {
		r.buf = r.buf[len(r.buf)-r.max:]
	}
}

// newest returns the events, newest first.
func (r *eventRing) newest() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]event, len(r.buf))
	for i, e := range r.buf {
		out[len(r.buf)-1-i] = e
	}
	return out
}

// eventServers records the master's requests to tablet servers as events.
type eventServers struct {
	inner  *serverClient
	events *eventRing
}

func (e *eventServers) List(ctx context.Context, server string) ([]assign.Served, error) {
	return e.inner.List(ctx, server)
}

func (e *eventServers) Load(ctx context.Context, server string, t assign.Tablet, rec master.RecoverySource) error {
	err := e.inner.Load(ctx, server, t, rec)
	detail := t.Table
	if rec.From != "" {
		detail += ", recovering from " + rec.From
		if rec.Sorted {
			detail += " (sorted log)"
		}
	}
	if err != nil {
		detail += fmt.Sprintf(": %v", err)
	}
	e.events.add(event{Kind: "load", Tablet: string(t.ID), Server: server, Detail: detail})
	return err
}

func (e *eventServers) Unload(ctx context.Context, server, tabletID string) error {
	err := e.inner.Unload(ctx, server, tabletID)
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	e.events.add(event{Kind: "unload", Tablet: tabletID, Server: server, Detail: detail})
	return err
}

func (e *eventServers) SortLog(ctx context.Context, dead string, sorters []string) error {
	err := e.inner.SortLog(ctx, dead, sorters)
	detail := fmt.Sprintf("%d sorters", len(sorters))
	if err != nil {
		detail += fmt.Sprintf(": %v", err)
	}
	e.events.add(event{Kind: "sortlog", Server: dead, Detail: detail})
	return err
}
