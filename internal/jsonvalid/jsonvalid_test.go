package jsonvalid

import (
	"encoding/json"
	"strings"
	"testing"
)

var cases = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `1`, `-`, `01`, `1.`, `.5`, `1.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-1.25e-3`,
	`true`, `false`, `null`, `tru`, `nul`, `True`, `truex`, `true false`, ` {"a":1} `, "\t[1,\n2]\r\n",
	`{"a":1,}`, `[1,]`, `[,1]`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `[1 2]`, `{"a":[{"b":null}],"c":"d"}`,
	`"\"\\\/\b\f\n\r\t"`, `"\u00e9\uD83D\uDE00"`, `"\u00g0"`, `"\x"`, `"\u12"`, `"unterminated`, "\"tab\there\"", "\"nl\nhere\"",
	"\"\xff\xfe\"", "\"é\"", `"\`, `{"a":"\u"}`, `[[[[]]]]`, `{"":""}`, "\x00", `1 `, ` 1`, `[1]x`, `"a"b`, `-a`, `- 1`, `2.e3`,
}

func TestValidAgreesWithEncodingJSON(t *testing.T) {
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)        // past the fast path's depth: encoding/json's answer
	tooDeep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001) // past encoding/json's own limit
	for _, c := range append(cases, deep, tooDeep, strings.Repeat("[", 64)+strings.Repeat("]", 64)) {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

// The fast path answers the common case itself, without encoding/json.
func TestFastPathTakesTheCommonCase(t *testing.T) {
	for _, c := range []string{`{"sched_ns":1765000000123456789,"seq":12,"pad":"xxxx"}`, `[1,2.5,-3e2,"a\n",true,null,{}]`, `"x"`} {
		if !fastValid([]byte(c)) {
			t.Errorf("fastValid(%q) = false", c)
		}
	}
}

// FuzzValid: on any input, Valid says what encoding/json.Valid says.
//
//	go test ./internal/jsonvalid -fuzz FuzzValid -fuzztime 60s
func FuzzValid(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	arg := []byte(`{"sched_ns":1765000000123456789,"seq":123456,"pad":"` + strings.Repeat("x", 140) + `"}`)
	for _, v := range []struct {
		name  string
		valid func([]byte) bool
	}{{"jsonvalid", Valid}, {"encoding_json", json.Valid}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(arg)))
			for b.Loop() {
				if !v.valid(arg) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
