--- specfill for Neovim: streamed ghost-text completions from `specfill serve`.
---
---   require('specfill').setup({ cmd = { '/path/to/.venv/bin/specfill', 'serve' } })
local suggestion = require('specfill.suggestion')
local text = require('specfill.text')

local api = vim.api
local M = {}

local STREAM_NOTIFICATION = 'specfill/streamCompletion'
local STATS_REQUEST = 'specfill/stats'
local WARM_NOTIFICATION = 'specfill/warm'

---@class specfill.Config
M.defaults = {
  cmd = { 'specfill', 'serve' },
  filetypes = { 'python', 'javascript', 'typescript', 'typescriptreact', 'rust', 'go', 'java', 'c', 'cpp' },
  root_markers = { '.git', 'pyproject.toml', 'package.json', 'Cargo.toml', 'go.mod' },
  -- The server's initializationOptions: model, speculation, maxNewTokens, temperature, contextWindow.
  init_options = {},
  debounce_ms = 150,
  auto_trigger = true,
  -- Insert-mode keys; a key may be a string, a list of strings, or false for none.
  -- <Esc> needs no mapping: leaving insert mode dismisses the suggestion.
  keymaps = {
    accept = '<Tab>',
    accept_word = { '<M-w>', '<C-Right>' },
    accept_line = '<M-l>',
    dismiss = '<C-]>',
  },
  -- On Neovim >= 0.12, use the built-in vim.lsp.inline_completion instead of this plugin's
  -- ghost text (it shows only the final answer, not the stream).
  builtin = false,
}

---@type specfill.Config
M.config = vim.deepcopy(M.defaults)
M.enabled = true

local timer = assert(vim.uv.new_timer())

-- An empty Lua table encodes as a JSON array; the server expects an object.
local function as_object(options)
  return next(options) == nil and vim.empty_dict() or options
end

local function client_for(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr, name = 'specfill' })[1]
end

local function use_builtin()
  return M.config.builtin and vim.fn.has('nvim-0.12') == 1 and vim.lsp.inline_completion ~= nil
end

--- Request a suggestion at the cursor now (also what the debounced auto trigger calls).
function M.trigger()
  local bufnr = api.nvim_get_current_buf()
  local client = client_for(bufnr)
  if M.enabled and client then
    suggestion.request(bufnr, client)
  end
end

--- Ask the server to prefill the prompt for the cursor in the background (cursor hold,
--- entering insert mode, after accepting): the next request there starts warm. The server
--- drops a warm the moment a real request arrives.
function M.warm(bufnr)
  bufnr = bufnr or api.nvim_get_current_buf()
  local client = client_for(bufnr)
  if not (M.enabled and client) or api.nvim_get_current_buf() ~= bufnr then
    return
  end
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  client:notify(WARM_NOTIFICATION, params)
end

local function schedule_trigger(bufnr)
  local tick = api.nvim_buf_get_changedtick(bufnr)
  timer:stop()
  timer:start(M.config.debounce_ms, 0, vim.schedule_wrap(function()
    local still_here = api.nvim_get_current_buf() == bufnr and api.nvim_buf_is_valid(bufnr)
    if still_here and api.nvim_buf_get_changedtick(bufnr) == tick and vim.fn.mode() == 'i' then
      M.trigger()
    end
  end))
end

local function accept_with(pick)
  return function()
    local bufnr = api.nvim_get_current_buf()
    local result = suggestion.accept(bufnr, pick)
    vim.schedule(function()
      -- All of it taken: ask for the next suggestion now, not after the debounce (150 ms
      -- against an answer the server has ready in a few ms: it recognises the accepted text
      -- in the document and answers from the generation it precomputed for it). Part
      -- taken: the rest stays shown; warm the spot.
      if result and not suggestion.current(bufnr) and M.config.auto_trigger then
        timer:stop() -- the accept's own TextChangedI may have started the debounce
        M.trigger()
      else
        M.warm(bufnr)
      end
    end)
    return result
  end
end

M.accept = accept_with(function(rest)
  return rest
end)
M.accept_word = accept_with(text.next_word)
M.accept_line = accept_with(text.next_line)

function M.dismiss()
  suggestion.dismiss(api.nvim_get_current_buf())
end

--- The ghost text now shown in the current buffer, or nil.
function M.visible_text()
  return suggestion.visible_text(api.nvim_get_current_buf())
end

--- Fetch the server's statistics; `callback(err, stats)`.
function M.stats(callback)
  local client = client_for(api.nvim_get_current_buf()) or vim.lsp.get_clients({ name = 'specfill' })[1]
  if not client then
    return callback({ message = 'specfill is not running' }, nil)
  end
  -- An empty object rather than no params: pygls rejects a custom request without them.
  client:request(STATS_REQUEST, vim.empty_dict(), function(err, result)
    callback(err, result)
  end)
end

local function describe(stats)
  local function pct(x)
    return x and ('%d%%'):format(math.floor(x * 100 + 0.5)) or '–'
  end
  local function speed(x)
    return x and ('%.1f'):format(x) or '–'
  end
  return ('%s accepted · %s tok/s'):format(pct(stats.acceptance_rate), speed(stats.tokens_per_s))
end

local function show_stats()
  M.stats(function(err, stats)
    if err then
      return vim.notify('specfill: ' .. err.message, vim.log.levels.WARN)
    end
    local last = stats.last and ('last completion: %s, %s tokens'):format(describe(stats.last), stats.last.generated_tokens or '–')
      or 'no completion yet'
    vim.notify(('specfill: %s\nall completions: %s'):format(last, describe(stats.totals or {})), vim.log.levels.INFO)
  end)
end

--- Send new server options (same shape as `init_options`) to running servers.
function M.update_server_options(options)
  M.config.init_options = vim.tbl_deep_extend('force', M.config.init_options, options)
  for _, client in ipairs(vim.lsp.get_clients({ name = 'specfill' })) do
    client:notify('workspace/didChangeConfiguration', { settings = { specfill = as_object(M.config.init_options) } })
  end
end

local function start_server(bufnr)
  local root = vim.fs.root(bufnr, M.config.root_markers) or vim.fn.getcwd()
  vim.lsp.start({
    name = 'specfill',
    cmd = M.config.cmd,
    root_dir = root,
    init_options = as_object(M.config.init_options),
    handlers = {
      [STREAM_NOTIFICATION] = function(_, params, ctx)
        suggestion.on_stream(params, ctx.client_id)
      end,
    },
  }, { bufnr = bufnr })
end

local function map_keys()
  local function map(keys, action, fallback)
    keys = type(keys) == 'string' and { keys } or keys or {}
    for _, lhs in ipairs(keys) do
      -- An expr mapping may not change the buffer; it hands the action to <Cmd>, or types
      -- the key itself when no suggestion is shown.
      vim.keymap.set('i', lhs, function()
        if suggestion.visible_text(api.nvim_get_current_buf()) then
          return ('<Cmd>lua require("specfill").%s()<CR>'):format(action)
        end
        return fallback and lhs or ''
      end, { expr = true, replace_keycodes = true, desc = 'specfill: ' .. action })
    end
  end
  local keys = M.config.keymaps
  map(keys.accept, 'accept', true)
  map(keys.accept_word, 'accept_word', true)
  map(keys.accept_line, 'accept_line', true)
  map(keys.dismiss, 'dismiss', true)
end

local function map_builtin_keys()
  local accept = M.config.keymaps.accept
  for _, lhs in ipairs(type(accept) == 'string' and { accept } or accept or {}) do
    vim.keymap.set('i', lhs, function()
      if not vim.lsp.inline_completion.get() then
        return lhs
      end
    end, { expr = true, replace_keycodes = true, desc = 'specfill: accept (built-in)' })
  end
end

local function create_autocmds(group)
  api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = M.config.filetypes,
    callback = function(args)
      start_server(args.buf)
    end,
  })
  -- Warm where the cursor is as soon as it is known: the server attached to a file just
  -- opened (LspAttach), a switch to another buffer (BufEnter), a rest, insert mode. A first
  -- request in a file otherwise waits for its whole prompt (CursorHold comes only after
  -- 'updatetime', 4 s by default).
  api.nvim_create_autocmd({ 'CursorHold', 'CursorHoldI', 'InsertEnter', 'BufEnter', 'LspAttach' }, {
    group = group,
    callback = function(args)
      M.warm(args.buf)
    end,
  })
  if use_builtin() then
    api.nvim_create_autocmd('LspAttach', {
      group = group,
      callback = function(args)
        local client = vim.lsp.get_client_by_id(args.data.client_id)
        if client and client.name == 'specfill' then
          vim.lsp.inline_completion.enable(true, { bufnr = args.buf })
        end
      end,
    })
    return
  end
  api.nvim_create_autocmd('TextChangedI', {
    group = group,
    callback = function(args)
      local kept = suggestion.on_text_changed(args.buf)
      if not kept and M.config.auto_trigger and M.enabled and client_for(args.buf) then
        schedule_trigger(args.buf)
      end
    end,
  })
  api.nvim_create_autocmd('CursorMovedI', {
    group = group,
    callback = function(args)
      suggestion.on_cursor_moved(args.buf)
    end,
  })
  api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
    group = group,
    callback = function(args)
      timer:stop()
      suggestion.dismiss(args.buf)
    end,
  })
end

local function create_commands()
  api.nvim_create_user_command('SpecfillStats', show_stats, { desc = 'specfill: show completion statistics' })
  api.nvim_create_user_command('SpecfillToggle', function()
    M.enabled = not M.enabled
    if not M.enabled then
      M.dismiss()
    end
    vim.notify('specfill: completions ' .. (M.enabled and 'on' or 'off'))
  end, { desc = 'specfill: turn inline completions on or off' })
end

---@param opts specfill.Config?
function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  -- Lists replace, not merge: a user's list of keys or filetypes must not keep the defaults.
  for _, key in ipairs({ 'cmd', 'filetypes', 'root_markers' }) do
    M.config[key] = opts and opts[key] or M.config[key]
  end
  for action, keys in pairs(opts and opts.keymaps or {}) do
    M.config.keymaps[action] = keys
  end
  api.nvim_set_hl(0, suggestion.hl_group, { link = 'Comment', default = true })
  local group = api.nvim_create_augroup('specfill', { clear = true })
  create_autocmds(group)
  create_commands()
  if use_builtin() then
    map_builtin_keys()
  else
    map_keys()
  end
  -- Buffers already open when setup() runs (lazy loading) get the server too.
  for _, bufnr in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(M.config.filetypes, vim.bo[bufnr].filetype) then
      start_server(bufnr)
    end
  end
end

return M
