/**
 * Untrusted text (event data, keys, ids, error messages, group names read
 * from Redis) must not reach the operator's terminal as control sequences:
 * a producer could otherwise retitle the window (`ESC ]0;...BEL`), clear the
 * screen (`ESC [2J`), or forge output lines with CR and LF. Every control
 * character is shown visibly instead, as an escape a reader can recognise.
 */

// C0 controls, DEL and C1 controls (U+0080 to U+009F: terminals read U+009B as CSI).
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/g;
// JSON.stringify escapes C0 already, but leaves DEL and C1 as they are.
const JSON_UNESCAPED_CONTROLS = /[\u007f-\u009f]/g;

/**
 * `text` with each control character shown as `\x1b` (C0, DEL) or `\u009b`
 * (C1); CR and LF as `\r` and `\n`; a tab as a space. With `keepNewlines`,
 * LF stays a line break: for multi-line text such as a stack, or a whole
 * rendering whose single-line values were escaped already.
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

/** JSON text with DEL and C1 written as `\u` escapes: the same document to a parser, inert on a terminal. */
export function escapeJsonControls(json: string): string {
  // Outside strings, JSON text holds no such character; inside one, `\u009b` is a valid escape of it.
  return json.replace(JSON_UNESCAPED_CONTROLS, (char) => `\\u${hex(char.charCodeAt(0), 4)}`);
}

function hex(code: number, width: number): string {
  return code.toString(16).padStart(width, '0');
}
