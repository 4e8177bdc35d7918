package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// targetFlags are the flags of an HTTP target (job submit, schedule
// create and update; docs/delivery.md).
type targetFlags struct {
	url, method, secret string
	headers             []string
	timeout             time.Duration
	retry               []uint
}

func (f *targetFlags) add(fl *pflag.FlagSet, what string) {
	fl.StringVar(&f.url, "target-url", "", what+" is delivered by coordd's nodes to this http(s) URL instead of a worker (the servers' --delivery-allow must name its host)")
	fl.StringVar(&f.method, "target-method", "", "the target's HTTP method (default POST)")
	fl.StringArrayVar(&f.headers, "target-header", nil, "Name: value header of every request to the target, repeatable")
	fl.DurationVar(&f.timeout, "target-timeout", 0, "bound of one request to the target (default the visibility timeout)")
	fl.UintSliceVar(&f.retry, "target-retry-status", nil, "4xx codes that fail an attempt retryably too (429 and 5xx always do), comma-separated")
	fl.StringVar(&f.secret, "target-secret", "", "name of the signing secret configured on the servers (--delivery-secrets): Standard Webhooks signatures")
}

// given reports whether any target flag was given (a value other than
// its default): any of them sets the whole target.
func (f *targetFlags) given() bool {
	return f.url != "" || f.method != "" || f.secret != "" || len(f.headers) > 0 || f.timeout != 0 || len(f.retry) > 0
}

// check finds bad values before any call (usage errors).
func (f *targetFlags) check() error {
	if !f.given() {
		return nil
	}
	if u, err := url.Parse(f.url); f.url == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("--target-url %q: want an http:// or https:// URL (the other --target-* flags need it)", f.url)
	}
	for _, h := range f.headers {
		if k, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("--target-header %q: want Name: value", h)
		}
	}
	if f.timeout < 0 {
		return fmt.Errorf("--target-timeout %s: negative", f.timeout)
	}
	return nil
}

// target is the target the flags describe (nil without a URL).
func (f *targetFlags) target() *coordv1.HttpTarget {
	if f.url == "" {
		return nil
	}
	t := &coordv1.HttpTarget{Url: f.url, Method: f.method, Secret: f.secret}
	for _, h := range f.headers {
		k, v, _ := strings.Cut(h, ":")
		if t.Headers == nil {
			t.Headers = map[string]string{}
		}
		t.Headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if f.timeout > 0 {
		t.Timeout = durationpb.New(f.timeout)
	}
	for _, c := range f.retry {
		t.RetryableStatus = append(t.RetryableStatus, uint32(c))
	}
	return t
}

// targetText shows a target on one line: method, URL and what is set
// (the secret by name: the servers never return a key).
func targetText(t *coordv1.HttpTarget) string {
	parts := []string{t.GetMethod() + " " + t.GetUrl()}
	if t.GetSecret() != "" {
		parts = append(parts, "signed with "+t.GetSecret())
	}
	if d := t.GetTimeout(); d != nil {
		parts = append(parts, "timeout "+d.AsDuration().String())
	}
	if len(t.GetHeaders()) > 0 {
		names := make([]string, 0, len(t.GetHeaders()))
		for k := range t.GetHeaders() {
			names = append(names, k)
		}
		slices.Sort(names)
		parts = append(parts, "headers "+strings.Join(names, ","))
	}
	if len(t.GetRetryableStatus()) > 0 {
		parts = append(parts, fmt.Sprintf("also retried on %v", t.GetRetryableStatus()))
	}
	return strings.Join(parts, ", ")
}

// queueTargetCmd is "queue target set|clear|list": a queue's HTTP target.
func (a *app) queueTargetCmd() *cobra.Command {
	var tf targetFlags
	set := a.newCmd("set QUEUE --target-url URL [--target-secret NAME] [--target-*]", "Deliver the queue's new jobs (those without a target of their own) to an HTTP endpoint",
		`  coordctl queue target set billing --target-url https://billing.internal/jobs --target-secret billing`,
		func(cmd *cobra.Command, pos []string) error {
			if err := cobra.ExactArgs(1)(cmd, pos); err != nil {
				return err
			}
			if tf.url == "" {
				return fmt.Errorf("--target-url is required (queue target clear removes a target)")
			}
			return tf.check()
		},
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.Queue().SetTarget(ctx, &coordv1.QueueSetTargetRequest{Queue: pos[0], Target: tf.target()})
			return a.reply("queue target set "+pos[0], resp, err, func(w io.Writer) { queueTargetsTable(w, []*coordv1.QueueTarget{resp.GetTarget()}) })
		})
	tf.add(set.Flags(), "the queue's new jobs")
	clear := a.newCmd("clear QUEUE", "Stop delivering the queue's new jobs (jobs already there keep their target)",
		`  coordctl queue target clear billing`, cobra.ExactArgs(1),
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.Queue().SetTarget(ctx, &coordv1.QueueSetTargetRequest{Queue: pos[0]})
			return a.reply("queue target clear "+pos[0], resp, err, func(w io.Writer) { fmt.Fprintf(w, "queue %s: no target\n", pos[0]) })
		})
	list := a.newCmd("list [QUEUE]", "The queues' HTTP targets", `  coordctl queue target list`, cobra.MaximumNArgs(1),
		func(ctx context.Context, pos []string) error {
			resp, err := a.client.Queue().Targets(ctx, &coordv1.QueueTargetsRequest{Queue: firstArg(pos)})
			return a.reply("queue target list", resp, err, func(w io.Writer) { queueTargetsTable(w, resp.GetTargets()) })
		})
	return group("target", "A queue's HTTP target: its new jobs are delivered there by coordd's nodes (docs/delivery.md)", set, clear, list)
}

func queueTargetsTable(out io.Writer, ts []*coordv1.QueueTarget) {
	tab(out, func(w io.Writer) {
		row(w, "QUEUE", "TARGET", "UPDATED BY", "UPDATED")
		for _, t := range ts {
			row(w, t.GetQueue(), targetText(t.GetTarget()), orDash(t.GetUpdatedBy()), utc(t.GetUpdatedAt().AsTime().UnixMilli()))
		}
	})
}
