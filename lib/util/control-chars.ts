/**
 * Untrusted text (event data, keys, ids, error messages, group names read
 * from Redis) must not reach the operator's terminal as control sequences,
 * whether the CLI prints it or the library logs it:
 * a producer could otherwise retitle the window (`ESC ]0;...BEL`), clear the
 * screen (`ESC [2J`), forge output lines with CR and LF, or reorder what a
 * line shows with bidirectional controls (an id that reads as another one).
 * Every such character is shown visibly instead, as an escape a reader can
 * recognise.
 */

// C0 controls, DEL and C1 controls (U+0080 to U+009F: terminals read U+009B as CSI); then the Unicode
// characters that move text around: bidirectional marks, embeddings, overrides and isolates (U+061C,
// U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), and the line and paragraph separators U+2028 and
// U+2029, at which some terminals and editors break lines.
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
// JSON.stringify escapes C0 already, but leaves the others as they are.
const JSON_UNESCAPED_CONTROLS = /[\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;

/**
 * `text` with each control character shown as `\x1b` (C0, DEL) or `\u009b`
 * (C1, and the bidirectional controls and separators: `\u202e`); CR and LF
 * as `\r` and `\n`; a tab as a space. With `keepNewlines`, LF stays a line
 * break: for multi-line text such as a stack, or a whole rendering whose
 * single-line values were escaped already.
 */
export function escapeControls(text: string, keepNewlines = false): string {
  return text.replace(CONTROL_CHARS, (char) => {
    if (char === '\n') return keepNewlines ? char : '\\n';
    if (char === '\r') return '\\r';
    if (char === '\t') return ' ';
    const code = char.charCodeAt(0);
    return code >= 0x80 ? `\\u${hex(code, 4)}` : `\\x${hex(code, 2)}`;
  });
}

/**
 * JSON text with DEL, C1, the bidirectional controls and the separators
 * written as `\u` escapes: the same document to a parser, inert on a terminal.
 */
export function escapeJsonControls(json: string): string {
  // Outside strings, JSON text holds no such character; inside one, `\u009b` is a valid escape of it.
  return json.replace(JSON_UNESCAPED_CONTROLS, (char) => `\\u${hex(char.charCodeAt(0), 4)}`);
}

function hex(code: number, width: number): string {
  return code.toString(16).padStart(width, '0');
}
