--- Pure helpers on suggestion text. Columns are byte offsets, rows 0-based (like the API).
local M = {}

-- Non-ASCII bytes count as word characters so that accepting a word never splits a
-- multi-byte character.
local WORD = '[%w_\128-\255]+'
local PUNCT = '[^%w_%s\128-\255]+'

--- The part of `text` that "accept word" takes: leading blanks and one word, or one run of
--- punctuation; at a line break, the break and the next line's indentation.
---@param text string
---@return string
function M.next_word(text)
  return text:match('^[ \t]*' .. WORD)
    or text:match('^[ \t]*' .. PUNCT)
    or text:match('^\r?\n[ \t]*')
    or text
end

--- The part of `text` that "accept line" takes: the rest of the current line; when the
--- text starts with a line break, the break and the whole next line.
---@param text string
---@return string
function M.next_line(text)
  return text:match('^\n?[^\n]*')
end

---@param text string
---@return string[]
function M.lines(text)
  return vim.split(text, '\n', { plain = true })
end

--- Where the cursor ends after inserting `text` at (`row`, `col`).
---@return integer row, integer col
function M.end_position(row, col, text)
  local lines = M.lines(text)
  if #lines == 1 then
    return row, col + #lines[1]
  end
  return row + #lines - 1, #lines[#lines]
end

--- The text `insert_text` adds when it replaces buffer text from `start_col` to the cursor
--- at `col` on `line`: servers may repeat what the user already typed on the line.
---@return string
function M.strip_typed(line, start_col, col, insert_text)
  if start_col >= col then
    return insert_text
  end
  local typed = line:sub(start_col + 1, col)
  if insert_text:sub(1, #typed) == typed then
    return insert_text:sub(#typed + 1)
  end
  return insert_text
end

return M
