// Drills that break the lease store or the membership: etcd stopped or
// wiped, a node's own lease deleted, a node removed, nodes added.
import type { Drill } from './drill-kit.ts';

export const STORE_DRILLS: readonly Drill[] = [];
