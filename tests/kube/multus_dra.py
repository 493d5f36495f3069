#!/usr/bin/env python3
"""A STAND-IN for the step of Multus (main, after v4.3.0) that turns a pod's ResourceClaims into
the `deviceID` of a delegate: "DRA mode". No registry ships Multus and we may not build it, so
this does exactly that step, written apart from our code from Multus' source as of
k8snetworkplumbingwg/multus-cni 95a0932 (2026): PR #1492 "dra-resourcename" (commit fb50997,
"feat: DRA resource.k8s.io/v1 integration via draclient", the first after v4.3.0), then 42212e2
(a claim that maps nothing does not fail CNI) and 0913b1c (field selectors on the slice list).

What Multus does, and this stand-in with it, over the API server's REST (stdlib HTTPS, bearer
token, the API's own JSON):

1. pkg/multus/multus.go GetPod: GET /api/v1/namespaces/NS/pods/NAME (from K8S_POD_NAMESPACE and
   K8S_POD_NAME in CNI_ARGS); a pod whose UID is not K8S_POD_UID is refused.
2. pkg/k8sclient/k8sclient.go getKubernetesDelegate: GET the NetworkAttachmentDefinition
   (/apis/k8s.cni.cncf.io/v1/namespaces/NS/network-attachment-definitions/NAME). Only when it
   has the annotation `k8s.v1.cni.cncf.io/resourceName` does Multus build the pod's resource
   map, once per pod (the first such NAD), in two steps:
   a. pkg/kubeletclient GetPodResourceMap: the kubelet's PodResources `List`, of which it reads
      only the containers' `devices` (device plugins), never `dynamic_resources`. A pod whose
      NIC comes from a claim has no device-plugin devices, so this step adds nothing: the
      stand-in starts from the empty map this step yields for such a pod (on a real node the
      kubelet's pod-resources socket, or the device-plugin checkpoint, must be readable, or
      Multus fails the ADD).
   b. pkg/draclient/draclient.go GetPodResourceMap: for each entry of the POD's
      `status.resourceClaimStatuses` (which the kube-controller-manager writes only for claims it
      generated from a ResourceClaimTemplate: a claim the pod names directly by
      `resourceClaimName` is never seen), GET the ResourceClaim
      (/apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/CLAIM); no
      `status.allocation.devices.results` is an error. For each result (driver, pool, device):
      list the driver's slices on the pod's node once per driver
      (/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=N,spec.driver=D) and
      index their devices by (driver/pool, device name), keeping only devices with a string
      `k8s.cni.cncf.io/deviceID`, with their string `k8s.cni.cncf.io/resourceName`. A result
      not in that index (another driver's GPU, or a device without deviceID) is skipped; one
      without resourceName is skipped. Otherwise its deviceID is appended to the map entry
      keyed by its resourceName. The IDs of each entry are then sorted
      (types.SortDeviceIDs). The pod's `status.extendedResourceClaimStatus` (extended
      resources backed by DRA) is handled the same way but strictly; not done here.
3. getKubernetesDelegate again: the entry keyed by the NAD's resourceName gives the delegate
   the deviceID at the entry's index, and the index moves on (the next NAD with the same
   resourceName gets the next device). No entry, or none left: no deviceID, and the delegate
   goes to the CNI unchanged.
4. pkg/types/conf.go LoadDelegateNetConf puts the deviceID into the delegate's config as
   `deviceID` AND `pciBusID` (every plugin of a list), and Multus offers it as the `deviceID`
   capability: the same as for a device plugin's device, which tests/attach/multus.rs reproduces
   (crates/test-support/src/multus.rs); the test hands the answer below to that code.

    multus_dra.py --server URL --ca FILE --token FILE --namespace NS --pod NAME --uid UID
                  --network NAD[,NAD...]

prints one line of JSON: {"pod": NODE-and-claims summary, "resourceMap": {resourceName:
[deviceIDs]}, "delegates": [{"network", "resourceName", "deviceID" (or null), "config"}],
"log": [what it skipped and why]}, or {"error": ...} and exits 1 when Multus would fail the ADD.
"""
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

DEVICE_ID = "k8s.cni.cncf.io/deviceID"
RESOURCE_NAME_ATTR = "k8s.cni.cncf.io/resourceName"
RESOURCE_NAME_ANNOT = "k8s.v1.cni.cncf.io/resourceName"


class Api:
    def __init__(self, server, ca, token):
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=ca)
        self.token = open(token).read().strip()

    def get(self, path, query=None):
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=20) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            status = json.load(e)
            raise Fail(f"GET {path}: {e.code} {status.get('message')}")


class Fail(Exception):
    pass


def string_attr(device, name):
    v = (device.get("attributes") or {}).get(name) or {}
    s = v.get("string")
    return s if isinstance(s, str) else ""


def dra_resource_map(api, pod, log):
    """draclient.GetPodResourceMap onto an empty map (what the kubelet step yields here)."""
    ns = pod["metadata"]["namespace"]
    node = (pod.get("spec") or {}).get("nodeName", "")
    resource_map = {}
    index = {}  # (driver/pool, device) -> (deviceID, resourceName)
    populated = set()
    for cs in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        claim_name = cs.get("resourceClaimName")
        if claim_name is None:
            log.append(f"status entry {cs.get('name')!r} has no resourceClaimName")
            continue
        claim = api.get(f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{claim_name}")
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
        if results is None:
            raise Fail(f"claim {claim_name} has no device allocation")
        resolved = 0
        for r in results:
            driver, pool, device = r["driver"], r["pool"], r["device"]
            if driver not in populated:
                sel = f"spec.driver={driver}"
                if node:
                    sel = f"spec.nodeName={node},spec.driver={driver}"
                slices = api.get("/apis/resource.k8s.io/v1/resourceslices", {"fieldSelector": sel})
                for s in slices.get("items") or []:
                    dp = f"{s['spec']['driver']}/{s['spec']['pool']['name']}"
                    for d in s["spec"].get("devices") or []:
                        dev_id = string_attr(d, DEVICE_ID)
                        if dev_id:
                            index[(dp, d["name"])] = (dev_id, string_attr(d, RESOURCE_NAME_ATTR))
                populated.add(driver)
            found = index.get((f"{driver}/{pool}", device))
            if found is None:
                log.append(f"skipped {driver}/{pool}/{device} of claim {claim_name}: not in any "
                           f"slice with a {DEVICE_ID}")
                continue
            dev_id, rname = found
            if not rname:
                log.append(f"skipped {driver}/{pool}/{device} of claim {claim_name}: no "
                           f"{RESOURCE_NAME_ATTR}")
                continue
            resource_map.setdefault(rname, []).append(dev_id)
            resolved += 1
        if resolved == 0 and results:
            log.append(f"claim {claim_name} maps nothing for Multus")
    for ids in resource_map.values():
        ids.sort()
    return resource_map


def main():
    a = sys.argv[1:]
    opt = {a[i][2:]: a[i + 1] for i in range(0, len(a) - 1, 2) if a[i].startswith("--")}
    try:
        api = Api(opt["server"], opt["ca"], opt["token"])
        ns, name = opt["namespace"], opt["pod"]
        pod = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        if pod["metadata"].get("uid") != opt["uid"]:
            raise Fail(f"expected pod UID {opt['uid']!r} but got {pod['metadata'].get('uid')!r} "
                       "from Kube API")
        log, resource_map, cursor, delegates = [], None, {}, []
        for net in opt["network"].split(","):
            nad = api.get(f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{net}")
            rname = (nad["metadata"].get("annotations") or {}).get(RESOURCE_NAME_ANNOT)
            device_id = None
            if rname is not None:
                if resource_map is None:
                    resource_map = dra_resource_map(api, pod, log)
                ids = resource_map.get(rname, [])
                i = cursor.get(rname, 0)
                if i < len(ids):
                    device_id = ids[i]
                    cursor[rname] = i + 1
                else:
                    log.append(f"{net}: no device left for resourceName {rname}")
            delegates.append({"network": net, "resourceName": rname, "deviceID": device_id,
                              "config": json.loads(nad["spec"]["config"])})
        print(json.dumps({"resourceMap": resource_map, "delegates": delegates, "log": log}))
    except Fail as e:
        print(json.dumps({"error": str(e)}))
        sys.exit(1)


if __name__ == "__main__":
    main()
