package main

import (
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/coordd/coordd/delivery"
)

// options reads the delivery flags: the allow-list, the secrets file and
// the CA bundle.
func (f deliveryFlags) options() (delivery.Options, error) {
	allow, err := delivery.ParseAllow(strings.Split(f.allow, ","))
	if err != nil {
		return delivery.Options{}, err
	}
	o := delivery.Options{Allow: allow, Concurrency: f.concurrency, PerTarget: f.perTarget}
	if f.secrets != "" {
		if o.Secrets, err = delivery.LoadSecrets(f.secrets); err != nil {
			return delivery.Options{}, err
		}
	}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return delivery.Options{}, fmt.Errorf("--delivery-ca: %w", err)
		}
		o.RootCAs = x509.NewCertPool()
		if !o.RootCAs.AppendCertsFromPEM(pem) {
			return delivery.Options{}, fmt.Errorf("--delivery-ca %s: no PEM certificate in it", f.ca)
		}
	}
	return o, nil
}
