--- One ghost-text suggestion per buffer: the request behind it, the text streamed so far,
--- the extmark that shows it, and partial acceptance.
local text = require('specfill.text')

local api = vim.api
local M = {}

M.namespace = api.nvim_create_namespace('specfill.ghost')
M.hl_group = 'SpecfillGhost'

local INLINE_COMPLETION = 'textDocument/inlineCompletion'
local TRIGGER_AUTOMATIC = 2 -- lsp.InlineCompletionTriggerKind.Automatic

---@class specfill.Suggestion
---@field client_id integer
---@field request_id integer? set while the request is pending
---@field text string the whole completion generated so far
---@field accepted integer bytes of `text` already in the buffer (accepted or typed over)
---@field origin {row: integer, col: integer} the cursor when the request was sent
---@field row integer where the rest of `text` would be inserted (0-based)
---@field col integer byte column of that point
---@field tick integer b:changedtick the suggestion is valid for
---@field done boolean the server has answered the request
---@field extmark integer?

---@type table<integer, specfill.Suggestion>
local by_buf = {}

local function cursor()
  local pos = api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

local function display(line)
  -- Virtual text shows a tab as one cell; expand it so the ghost lines up with real text.
  return (line:gsub('\t', string.rep(' ', vim.bo.tabstop)))
end

local function remaining(s)
  return s.text:sub(s.accepted + 1)
end

local function render(bufnr, s)
  local rest = remaining(s)
  if rest == '' then
    if s.extmark then
      api.nvim_buf_del_extmark(bufnr, M.namespace, s.extmark)
      s.extmark = nil
    end
    return
  end
  local lines = text.lines(rest)
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { display(lines[i]), M.hl_group } }
  end
  s.extmark = api.nvim_buf_set_extmark(bufnr, M.namespace, s.row, s.col, {
    id = s.extmark,
    virt_text = lines[1] ~= '' and { { display(lines[1]), M.hl_group } } or nil,
    virt_text_pos = 'inline',
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = 'combine',
  })
end

--- Hide the suggestion of `bufnr` and cancel its request if the server is still working.
---@param bufnr integer
function M.dismiss(bufnr)
  local s = by_buf[bufnr]
  if not s then
    return
  end
  by_buf[bufnr] = nil
  if s.request_id then
    local client = vim.lsp.get_client_by_id(s.client_id)
    if client then
      client:cancel_request(s.request_id)
    end
  end
  api.nvim_buf_clear_namespace(bufnr, M.namespace, 0, -1)
end

local function first_item_text(bufnr, s, result)
  local item = result and (result.items or result)[1]
  if not item then
    return ''
  end
  local insert = type(item.insertText) == 'table' and item.insertText.value or item.insertText or ''
  local start = item.range and item.range.start
  if not start or start.line ~= s.origin.row then
    return insert
  end
  local client = vim.lsp.get_client_by_id(s.client_id)
  local line = api.nvim_buf_get_lines(bufnr, s.origin.row, s.origin.row + 1, false)[1] or ''
  local start_col = vim.str_byteindex(line, client and client.offset_encoding or 'utf-16', start.character, false)
  return text.strip_typed(line, start_col, s.origin.col, insert)
end

local function on_response(bufnr, s, err, result)
  if by_buf[bufnr] ~= s then
    return -- superseded: this answer belongs to an older cursor position
  end
  s.request_id = nil
  s.done = true
  if err then
    vim.notify(('specfill: %s'):format(err.message), vim.log.levels.WARN)
    return M.dismiss(bufnr)
  end
  local final = first_item_text(bufnr, s, result)
  -- Text the user already typed over must still be a prefix of the final answer.
  if final:sub(1, s.accepted) ~= s.text:sub(1, s.accepted) then
    return M.dismiss(bufnr)
  end
  s.text = final
  render(bufnr, s)
end

--- Ask `client` for a suggestion at the cursor of the current window, replacing any other.
---@param bufnr integer
---@param client vim.lsp.Client
function M.request(bufnr, client)
  M.dismiss(bufnr)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = TRIGGER_AUTOMATIC }
  local row, col = cursor()
  local s = {
    client_id = client.id,
    text = '',
    accepted = 0,
    origin = { row = row, col = col },
    row = row,
    col = col,
    tick = api.nvim_buf_get_changedtick(bufnr),
    done = false,
  }
  by_buf[bufnr] = s
  local ok, request_id = client:request(INLINE_COMPLETION, params, function(err, result)
    on_response(bufnr, s, err, result)
  end, bufnr)
  if ok then
    s.request_id = request_id
  else
    by_buf[bufnr] = nil
  end
end

--- Handler of the server's `specfill/streamCompletion` notification.
---@param params {requestId: integer|string, text: string, done: boolean}
---@param client_id integer
function M.on_stream(params, client_id)
  for bufnr, s in pairs(by_buf) do
    if s.client_id == client_id and s.request_id == params.requestId then
      -- Text the user already typed over must still be a prefix of the stream.
      if params.text:sub(1, s.accepted) == s.text:sub(1, s.accepted) then
        s.text = params.text
        render(bufnr, s)
      end
      return
    end
  end
end

--- The suggestion shown at the cursor of the current window, if any.
---@param bufnr integer
---@return specfill.Suggestion?
function M.current(bufnr)
  local s = by_buf[bufnr]
  if not s or s.tick ~= api.nvim_buf_get_changedtick(bufnr) then
    return nil
  end
  local row, col = cursor()
  if row ~= s.row or col ~= s.col then
    return nil
  end
  return s
end

---@param bufnr integer
---@return string? text the ghost text now on screen
function M.visible_text(bufnr)
  local s = M.current(bufnr)
  local rest = s and remaining(s)
  return rest ~= '' and rest or nil
end

--- Insert the part of the ghost text that `pick` selects; keep showing the rest.
---@param bufnr integer
---@param pick fun(rest: string): string
---@return boolean accepted
function M.accept(bufnr, pick)
  local s = M.current(bufnr)
  local rest = s and remaining(s) or ''
  if rest == '' then
    return false
  end
  local part = pick(rest)
  api.nvim_buf_set_text(bufnr, s.row, s.col, s.row, s.col, text.lines(part))
  s.row, s.col = text.end_position(s.row, s.col, part)
  api.nvim_win_set_cursor(0, { s.row + 1, s.col })
  s.accepted = s.accepted + #part
  s.tick = api.nvim_buf_get_changedtick(bufnr)
  if s.done and remaining(s) == '' then
    M.dismiss(bufnr)
  else
    render(bufnr, s)
  end
  return true
end

--- After a text change: when the user typed exactly the start of the ghost text, keep the
--- suggestion (without a new request) and return true; otherwise dismiss it.
---@param bufnr integer
---@return boolean kept
function M.on_text_changed(bufnr)
  local s = by_buf[bufnr]
  if not s then
    return false
  end
  local tick = api.nvim_buf_get_changedtick(bufnr)
  if s.tick == tick then
    return true -- our own edit (accept)
  end
  local row, col = cursor()
  local rest = remaining(s)
  local line = api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  local typed = line:sub(s.col + 1, col)
  if row == s.row and col > s.col and rest:sub(1, #typed) == typed and #typed < #rest then
    s.accepted, s.col, s.tick = s.accepted + #typed, col, tick
    render(bufnr, s)
    return true
  end
  M.dismiss(bufnr)
  return false
end

--- After the cursor moved without a text change: dismiss when it left the suggestion.
---@param bufnr integer
function M.on_cursor_moved(bufnr)
  local s = by_buf[bufnr]
  if s and s.tick == api.nvim_buf_get_changedtick(bufnr) and not M.current(bufnr) then
    M.dismiss(bufnr)
  end
end

--- A copy of the state behind the suggestion, for inspection and tests.
---@param bufnr integer 0 for the current buffer
---@return {text: string, shown: string, pending: boolean, request_id: integer?, done: boolean}?
function M.inspect(bufnr)
  local s = by_buf[bufnr == 0 and api.nvim_get_current_buf() or bufnr]
  if not s then
    return nil
  end
  return { text = s.text, shown = remaining(s), pending = s.request_id ~= nil, request_id = s.request_id, done = s.done }
end

return M
