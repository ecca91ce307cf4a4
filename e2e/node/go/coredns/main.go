// CoreDNS for the e2e node's cluster DNS (scripts/node/build.sh, docs/node.md): CoreDNS's own
// main with only the plugins the node's Corefile uses. CoreDNS's default build links every
// plugin, with the AWS, Azure and Google Cloud SDKs; this is CoreDNS's documented way to
// choose plugins in an outside main (set dnsserver.Directives, import the plugins).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// In the order of CoreDNS's plugin.cfg: a directive's place sets the order plugins see a query.
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"cache",
	"kubernetes",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
