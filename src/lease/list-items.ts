// A Kubernetes list reply ({"kind":"NodeList",…,"metadata":{…},"items":[{…},{…}]}) taken apart
// as its bytes arrive: each item's text is handed on as soon as its closing brace is read, and
// the rest of the object (the items array left empty) is parsed at the end. So a list of 5,000
// Nodes, tens of MiB of JSON in one reply from the apiserver's watch cache, never exists whole:
// not as text, and not as one parsed tree. A byte scanner is enough because JSON's structure is
// ASCII: '{', '}', '[', ']', '"' and '\' never occur inside a multi-byte UTF-8 character, and
// inside a string only an unescaped '"' ends it. Anything that is not a well-formed list comes out
// as an error (a truncated reply, an item or a remainder over its bound, a remainder that is not
// JSON), never as a partial list.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COLON = 0x3a;
const ITEMS = Buffer.from('"items"');

/** Bounds of one reply's parts, bytes. */
export interface ListBounds {
  /** one item */
  readonly item: number;
  /** everything but the items (kind, apiVersion, metadata) */
  readonly rest: number;
}

export class ListTooLarge extends Error {}

/**
 * Feed it the reply's chunks (`push`), then `end()`: the list without its items, parsed.
 * `onItem` gets each item's JSON text as it completes.
 */
export class ListItemSplitter {
  private readonly bounds: ListBounds;
  private readonly onItem: (text: string) => void;
  private depth = 0;
  private inString = false;
  private escaped = false;
  /** the items array is open (its depth is 2: the list object is 1) */
  private inItems = false;
  /** the last string at depth 1 was the key "items", and only a colon has followed */
  private afterItemsKey = false;
  /** the bytes of the current depth-1 string, kept while it could still be "items" */
  private key: number[] | undefined;
  /** inside an item (an object in the items array) */
  private capturing = false;
  private item: Buffer[] = [];
  private itemSize = 0;
  private rest: Buffer[] = [];
  private restSize = 0;
  private items = 0;

  constructor(bounds: ListBounds, onItem: (text: string) => void) {
    this.bounds = bounds;
    this.onItem = onItem;
  }

  /** how many items were handed on */
  get count(): number {
    return this.items;
  }

  push(chunk: Buffer): void {
    // where the part of this chunk that belongs to the current item (or to the rest) starts
    let itemFrom = this.capturing ? 0 : -1;
    let restFrom = this.inItems ? -1 : 0;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i] as number;
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === BACKSLASH) this.escaped = true;
        else if (c === QUOTE) {
          this.inString = false;
          if (this.key !== undefined) {
            this.key.push(c);
            this.afterItemsKey = Buffer.from(this.key).equals(ITEMS);
            this.key = undefined;
          }
        }
        if (this.key !== undefined) {
          if (this.key.length < ITEMS.length) this.key.push(c);
          else this.key = undefined;
        }
        continue;
      }
      if (c === QUOTE) {
        this.inString = true;
        this.afterItemsKey = false;
        if (this.depth === 1) this.key = [c];
        continue;
      }
      if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        if (this.depth === 1 && c === OPEN_BRACKET && this.afterItemsKey) {
          // the items array: what follows up to its closing bracket is items, not rest
          this.appendRest(chunk.subarray(restFrom, i + 1));
          restFrom = -1;
          this.inItems = true;
        } else if (this.inItems && this.depth === 2 && c === OPEN_BRACE) {
          // an item (one that is not an object is no Node: skipped, as a string or number is)
          itemFrom = i;
          this.capturing = true;
        }
        this.afterItemsKey = false;
        this.depth++;
        continue;
      }
      if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        this.depth--;
        this.afterItemsKey = false;
        if (this.depth < 0) throw new Error('unbalanced JSON');
        if (this.capturing && this.depth === 2) {
          this.appendItem(chunk.subarray(itemFrom, i + 1));
          itemFrom = -1;
          this.emit();
        } else if (this.inItems && this.depth === 1) {
          // the items array closed: the rest goes on from its closing bracket
          this.inItems = false;
          restFrom = i;
        }
        continue;
      }
      if (c !== COLON && c > 0x20) this.afterItemsKey = false;
    }
    if (itemFrom >= 0) this.appendItem(chunk.subarray(itemFrom));
    if (restFrom >= 0) this.appendRest(chunk.subarray(restFrom));
  }

  /** The list without its items, once the reply is complete. */
  end(): unknown {
    if (this.depth !== 0 || this.inString || this.inItems)
      throw new Error('the list reply ended before the list did');
    const text = Buffer.concat(this.rest, this.restSize).toString('utf8');
    this.rest = [];
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new Error(`the reply is not a JSON list: ${JSON.stringify(text.slice(0, 100))}`);
    }
  }

  private appendItem(part: Buffer): void {
    this.itemSize += part.length;
    if (this.itemSize > this.bounds.item)
      throw new ListTooLarge(`a list item is larger than ${this.bounds.item} bytes`);
    this.item.push(part);
  }

  private appendRest(part: Buffer): void {
    this.restSize += part.length;
    if (this.restSize > this.bounds.rest)
      throw new ListTooLarge(`the list's own fields are larger than ${this.bounds.rest} bytes`);
    this.rest.push(part);
  }

  private emit(): void {
    const text = Buffer.concat(this.item, this.itemSize).toString('utf8');
    this.item = [];
    this.itemSize = 0;
    this.capturing = false;
    this.items++;
    this.onItem(text);
  }
}
