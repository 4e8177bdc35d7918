package schedule

import (
	"fmt"
	"strconv"
	"strings"
)

// Reading cron expressions. Standard cron (cronie, Vixie cron, Kubernetes,
// robfig/cron's ParseStandard) has five fields: minute hour day-of-month
// month day-of-week. Six fields mean different things elsewhere — seconds
// first in Quartz, Spring and robfig/cron's WithSeconds, a year last in
// AWS EventBridge — and a five-field expression with one token too many
// is a typo far more often than either ("5 0 * * * *" was read as hourly
// at :00:05). So a bare six-field expression is refused, and a seconds
// field needs the prefix SecondsPrefix, which cannot be mistaken:
// "@seconds 5 0 * * * *".

// SecondsPrefix introduces a six-field expression with seconds first.
const SecondsPrefix = "@seconds "

// cronField is one field of an expression: its name in errors, its range,
// and the names it accepts (lower case).
type cronField struct {
	name     string
	min, max int
	names    map[string]int
	valid    string // what a value may be, for errors
}

var (
	secondField = cronField{name: "second", min: 0, max: 59, valid: "a number 0-59"}
	minuteField = cronField{name: "minute", min: 0, max: 59, valid: "a number 0-59"}
	hourField   = cronField{name: "hour", min: 0, max: 23, valid: "a number 0-23"}
	domField    = cronField{name: "day-of-month", min: 1, max: 31, valid: "a number 1-31"}
	monthField  = cronField{name: "month", min: 1, max: 12, valid: "a month name (jan..dec) or a number 1-12",
		names: map[string]int{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}}
	// 0 and 7 are Sunday, as in cron(5).
	dowField = cronField{name: "day-of-week", min: 0, max: 7, valid: "a day name (mon..sun) or a number 0-7",
		names: map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}}
)

// descriptors are the named expressions of cron(5) and robfig/cron.
var descriptors = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
	"@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

const fiveFields = "minute hour day-of-month month day-of-week"

// parseCron reads a five-field expression, "@seconds" and six fields, or a
// descriptor. The error says which field and which token is wrong.
func parseCron(expr string) (cronSpec, error) {
	if d, ok := descriptors[strings.ToLower(expr)]; ok {
		expr = d
	}
	f := strings.Fields(expr)
	seconds := len(f) > 0 && strings.EqualFold(f[0], strings.TrimSpace(SecondsPrefix))
	switch {
	case seconds:
		f = f[1:]
		if len(f) != 6 {
			return cronSpec{}, fmt.Errorf("@seconds needs 6 fields (second %s), got %d", fiveFields, len(f))
		}
	case len(f) > 0 && strings.HasPrefix(f[0], "@"):
		return cronSpec{}, fmt.Errorf("unknown descriptor %q (use @yearly, @monthly, @weekly, @daily, @hourly, "+
			"\"@every <duration>\", \"@once <RFC 3339 time>\" or \"@seconds <6 fields, seconds first>\")", f[0])
	case len(f) == 6:
		return cronSpec{}, fmt.Errorf("6 fields: a cron expression has 5 (%s); for a seconds field first, write %q",
			fiveFields, SecondsPrefix+strings.Join(f, " "))
	case len(f) == 1:
		return cronSpec{}, fmt.Errorf("1 field: a cron expression has 5 (%s), or is a descriptor such as @daily", fiveFields)
	case len(f) != 5:
		return cronSpec{}, fmt.Errorf("%d fields: a cron expression has 5 (%s)", len(f), fiveFields)
	}
	var c cronSpec
	fields := []*uint64{&c.min, &c.hour, &c.dom, &c.month, &c.dow}
	defs := []cronField{minuteField, hourField, domField, monthField, dowField}
	if seconds {
		fields = append([]*uint64{&c.sec}, fields...)
		defs = append([]cronField{secondField}, defs...)
	} else {
		c.sec = 1 // second 0
	}
	for i, s := range f {
		bits, err := defs[i].parse(s)
		if err != nil {
			return cronSpec{}, fmt.Errorf("%s field: %v", defs[i].name, err)
		}
		*fields[i] = bits
	}
	// cronie's rule (entry.c: MIN_STAR, HR_STAR): a minute or hour field
	// written with a wildcard makes a cadence, not a fixed time of day.
	mi := len(f) - 5
	c.wildcard = isStar(f[mi]) || isStar(f[mi+1])
	c.finish()
	return c, nil
}

func isStar(s string) bool { return strings.HasPrefix(s, "*") || strings.HasPrefix(s, "?") }

// parse reads a comma-separated list of "*", "?", values, ranges "a-b"
// and steps ("*/n", "a-b/n", "a/n" = a to the maximum by n). A list
// element that is "*" or "?" without a step greater than 1 marks the field
// as written with a wildcard (starBit), which decides how day-of-month and
// day-of-week combine (robfig/cron's and cron(5)'s rule).
func (fd cronField) parse(s string) (uint64, error) {
	var bits uint64
	for _, el := range strings.Split(s, ",") {
		if el == "" {
			return 0, fmt.Errorf("empty element in %q", s)
		}
		b, err := fd.element(el)
		if err != nil {
			return 0, err
		}
		bits |= b
	}
	return bits, nil
}

func (fd cronField) element(el string) (uint64, error) {
	rng, stepStr, hasStep := strings.Cut(el, "/")
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepStr)
		if err != nil || n < 1 || strings.Contains(stepStr, "/") {
			return 0, fmt.Errorf("%q: the step after '/' must be a whole number of at least 1", el)
		}
		step = n
	}
	var lo, hi int
	star := rng == "*" || rng == "?"
	switch {
	case star:
		lo, hi = fd.min, fd.top()
	default:
		a, b, isRange := strings.Cut(rng, "-")
		var err error
		if lo, err = fd.value(a); err != nil {
			return 0, err
		}
		hi = lo
		if isRange {
			if hi, err = fd.value(b); err != nil {
				return 0, err
			}
			if hi < lo {
				return 0, fmt.Errorf("%q: the range ends before it starts", el)
			}
		} else if hasStep {
			hi = fd.top() // "a/n": from a to the last value by n
		}
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		b := v
		if fd.name == dowField.name {
			b %= 7 // 7 is Sunday
		}
		bits |= 1 << uint(b)
	}
	if star && step == 1 {
		bits |= starBit
	}
	return bits, nil
}

// top is the last value "*" and "a/n" run to: the maximum, except for the
// day of week, where 7 is Sunday again (0).
func (fd cronField) top() int {
	if fd.name == dowField.name {
		return 6
	}
	return fd.max
}

// value reads one value: a number in the field's range or a name.
func (fd cronField) value(s string) (int, error) {
	if v, ok := fd.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < fd.min || v > fd.max || s == "" || s[0] == '+' || s[0] == '-' {
		if s == "" {
			return 0, fmt.Errorf("a value is missing (want %s)", fd.valid)
		}
		return 0, fmt.Errorf("%q is not %s", s, fd.valid)
	}
	return v, nil
}
