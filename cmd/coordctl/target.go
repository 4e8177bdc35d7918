package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

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
