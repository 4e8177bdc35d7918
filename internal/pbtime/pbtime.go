// Package pbtime converts between the API's google.protobuf.Timestamp and
// Duration fields and the Unix milliseconds and millisecond durations the
// state machine (fsm/) keeps, at the edge where a request enters or an
// answer leaves. A zero instant (the state machine's "not set") is an unset
// Timestamp, so JSON shows it as null; a zero duration is "0s".
package pbtime

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// At is the Timestamp of a Unix millisecond instant; nil for 0.
func At(ms int64) *timestamppb.Timestamp {
	if ms == 0 {
		return nil
	}
	return timestamppb.New(time.UnixMilli(ms))
}

// AtMs is a Timestamp's Unix milliseconds; 0 for nil.
func AtMs(t *timestamppb.Timestamp) int64 {
	if t == nil {
		return 0
	}
	return t.AsTime().UnixMilli()
}

// Time is a Timestamp as a time.Time; the zero time for nil.
func Time(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// FromTime is the Timestamp of t; nil for the zero time.
func FromTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// Dur is the Duration of ms milliseconds.
func Dur(ms int64) *durationpb.Duration {
	return durationpb.New(time.Duration(ms) * time.Millisecond)
}

// DurMs is a Duration in whole milliseconds (rounded up, so that a
// positive duration never becomes 0); 0 for nil.
func DurMs(d *durationpb.Duration) int64 {
	if d == nil {
		return 0
	}
	v := d.AsDuration()
	ms := v.Milliseconds()
	if time.Duration(ms)*time.Millisecond < v {
		ms++
	}
	return ms
}

// FromDuration is the Duration of d; nil for 0, which requests read as
// "not set".
func FromDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// Duration is a Duration as a time.Duration; 0 for nil.
func Duration(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

// DurUs is the Duration of us microseconds.
func DurUs(us int64) *durationpb.Duration {
	return durationpb.New(time.Duration(us) * time.Microsecond)
}
